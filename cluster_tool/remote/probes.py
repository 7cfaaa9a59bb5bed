"""The probes of one node packed into ONE shell script, and its output split back per probe.

On one machine SSH handshakes dominate, so every probe of a node rides one session: the
script runs the probes side by side, then prints each one's exit status, stdout and stderr
behind a header carrying their byte lengths (`@@cluster-tool TOKEN NAME RC OUT ERR@@`), so
the output splits back exactly, whatever the tools print.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Iterable, Mapping

from cluster_tool.errors import ParseError
from cluster_tool.probes import Probe, ProbeOutput

__all__ = ["composite_script", "outputs_to_json", "split_output"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def composite_script(probes: Iterable[Probe], token: str | None = None) -> tuple[str, str]:
    """(script, token): a POSIX sh script running every probe in parallel, read-only."""
    token = token or secrets.token_hex(8)
    probes = list(probes)
    lines = [
        "#!/bin/sh",
        "# cluster-tool probes: read-only; every probe's output is printed behind a header.",
        "T=$(mktemp -d /tmp/cluster-tool.XXXXXX) || exit 97",
        "trap 'rm -rf \"$T\"' EXIT INT TERM",
        'export LC_ALL=C PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"',
        "if command -v timeout >/dev/null 2>&1; then TO=timeout; else TO=; fi",
        "run() {",
        '    if [ -n "$TO" ]; then',
        '        $TO -k 5 "$2" sh -c "$3" </dev/null >"$T/$1.out" 2>"$T/$1.err"',
        "    else",
        '        sh -c "$3" </dev/null >"$T/$1.out" 2>"$T/$1.err"',
        "    fi",
        '    echo $? >"$T/$1.rc"',
        "}",
    ]
    for probe in probes:
        if not _NAME.match(probe.name):
            raise ValueError(f"bad probe name {probe.name!r}")
        lines.append(f"run {probe.name} {int(probe.timeout_s)} {shlex.quote(probe.command())} &")
    lines.append("wait")
    names = " ".join(p.name for p in probes)
    lines += [
        f"for n in {names}; do",
        '    o=$(($(wc -c <"$T/$n.out"))); e=$(($(wc -c <"$T/$n.err")))',
        f'    printf "@@cluster-tool {token} %s %s %s %s@@\\n" "$n" "$(cat "$T/$n.rc")" "$o" "$e"',
        '    cat "$T/$n.out" "$T/$n.err"',
        "done",
    ]
    return "\n".join(lines) + "\n", token


def split_output(data: bytes, token: str) -> dict[str, ProbeOutput]:
    """The composite script's stdout back into one ProbeOutput per probe."""
    head = re.compile(
        rb"@@cluster-tool " + re.escape(token.encode()) + rb" ([a-z0-9-]+) (\d+) (\d+) (\d+)@@\n"
    )
    outputs: dict[str, ProbeOutput] = {}
    at = 0
    while at < len(data):
        m = head.match(data, at)
        if m is None:
            snippet = data[at : at + 80].decode("utf-8", "replace")
            raise ParseError(
                f"probe output: expected a `@@cluster-tool {token} ...@@` header at byte {at}",
                line=snippet,
            )
        name = m.group(1).decode()
        rc, n_out, n_err = int(m.group(2)), int(m.group(3)), int(m.group(4))
        start = m.end()
        out = data[start : start + n_out]
        err = data[start + n_out : start + n_out + n_err]
        if len(out) + len(err) != n_out + n_err:
            raise ParseError(f"probe output of {name} cut short ({len(data) - start} bytes left)")
        outputs[name] = ProbeOutput(
            rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )
        at = start + n_out + n_err
    return outputs


def outputs_to_json(outputs: Mapping[str, ProbeOutput]) -> dict[str, dict[str, object]]:
    """rc and stderr per probe (stdout is saved in its own file)."""
    return {name: {"rc": o.rc, "stderr": o.stderr} for name, o in outputs.items()}
