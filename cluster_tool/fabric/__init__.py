"""The one model of the fabric: how every HCA and switch is cabled, and the views of it.

    plan.py       the cabling plan (`cabling.csv`, `switch-links.csv`): node HCA -> leaf port,
                  leaf up-port -> spine port, from the spec or read back from the rendered
                  files; `FabricPlan` holds both as one value
    topology.py   where nodes sit (SU, leaf per rail, spines per leaf): the gate's view
    links.py      the rail x node link matrix of a run (up, or the fabric finding on each HCA):
                  the run record's and the report's view
    departures.py where a plan departs from the rail-optimized rule (fabric.departure)
    adopt.py      a running fabric read as cabled, in the spec's words (`cluster-tool adopt`)

Checks, the gate, the run record, the report and the lab read these; none rebuilds its own.
"""
