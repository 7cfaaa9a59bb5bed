"""CLI commands, one module per area; each exposes `register(app)`.

Every run of the tool builds every command from these modules, so they stay cheap to import and
to declare: libraries are imported inside the commands, and the modules do not use
`from __future__ import annotations`, because typer evaluates each string annotation anew on
every run (hundreds of parameters); names only for type checkers are quoted instead.
"""
