"""`dcgmi diag -r 1|2|3|4`: the verdict of every test, per GPU where DCGM says, and the
warning text that explains a failure. Reads the DCGM 3.x table and the 4.x layout."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster_tool.parsers.base import ParseError, noise_recorder, parser

__all__ = ["VERDICTS", "DcgmDiag", "DcgmMessage", "DcgmTest", "parse_dcgmi_diag"]

VERDICTS = ("Pass", "Fail", "Skip", "Warn")
# Worst first: one failing GPU fails the test, a warning outranks a pass, a skip is least.
_SEVERITY = {"Fail": 3, "Warn": 2, "Pass": 1, "Skip": 0}

_BORDER = re.compile(r"^\+-+\+-+\+$")
_HEADER_ROW = re.compile(r"^\|\s*Diagnostic\s+\|\s*Result\s+\|$")
_HEADER_RULE = re.compile(r"^\+=+\+=+\+$")
_CATEGORY = re.compile(r"^[|+]-----  (?P<name>[A-Za-z][A-Za-z ]*?)  -*\+-+[|+]$")
# DCGM 3.x: "Pass - All", "Fail - GPU: 0", "Pass - GPUs: 1, 2, 3"; Deployment tests and
# every DCGM 4.x test: a bare verdict.
_VERDICT_3X = re.compile(
    r"^(?P<verdict>Pass|Fail|Skip|Warn) - "
    r"(?:(?P<all>All)|GPUs?: (?P<gpus>\d{1,20}(?:, \d{1,20})*))$"
)
_VERDICT_BARE = re.compile(r"^(?P<verdict>Pass|Fail|Skip|Warn)$")
# DCGM 4.x per-entity lines under a test: "GPU0: Pass" (CPU EUD prints CPU entities).
_ENTITY = re.compile(r"^(?P<kind>GPU|CPU)(?P<index>\d{1,20}): (?P<verdict>Pass|Fail|Skip|Warn)$")
_EUD_CODE = re.compile(r"^Code: \((?P<code>\d{1,20})\)$")
_MESSAGE_KINDS = ("Warning", "Error", "Info")
_GPU_IN_TEXT = re.compile(r"\bGPU ?(\d{1,20})\b")
# Every GPU a message names: "GPU 3", "GPU3", "GPUs 0, 1 and 2", "GPU(s) 0,1".
_GPU_LIST_IN_TEXT = re.compile(
    r"\bGPU(?:s|\(s\))?:? ?(\d{1,20}(?:(?:\s*+,\s*+|\s++and\s++)\d{1,20})*+)\b"
)
# The info column is 46 wide and DCGM wraps messages every 45 characters.
_CHUNK = 45
_PREAMBLE = ("Successfully ran diagnostic for group.",)


@dataclass(frozen=True)
class DcgmMessage:
    """A Warning / Error / Info text, unwrapped; `gpu` is the first GPU it names, `gpus` all."""

    kind: str
    text: str
    gpu: int | None
    line_no: int
    gpus: tuple[int, ...] = ()  # every GPU the text names, in order (wrapped text included)


@dataclass(frozen=True)
class DcgmTest:
    """One test row. `verdict` is DCGM's (4.x) or the worst over the GPU groups (3.x);
    `all_gpus` when DCGM 3.x printed `- All`; `gpus` maps GPU id -> verdict."""

    category: str
    name: str
    verdict: str
    all_gpus: bool
    gpus: dict[int, str]
    cpus: dict[int, str]
    messages: tuple[DcgmMessage, ...]
    eud_code: int | None
    line_no: int


@dataclass(frozen=True)
class DcgmDiag:
    """The whole run: metadata (4.x and late 3.x print it), tests in printed order, the
    overall verdict (worst test), and the GPUs any test failed on. A capture cut off
    before the closing border is still read (`complete` False): its rows are real."""

    layout: str  # "3.x" (Pass - All / GPU lists) or "4.x" (per-GPU "GPU0: Pass" lines)
    dcgm_version: str | None
    driver_version: str | None
    gpu_device_ids: tuple[str, ...]
    metadata: dict[str, str]
    tests: tuple[DcgmTest, ...]
    verdict: str
    failed_gpus: tuple[int, ...]
    complete: bool  # the closing border was seen; False for a cut-off capture

    def test(self, name: str) -> DcgmTest:
        for test in self.tests:
            if test.name == name:
                return test
        raise KeyError(name)


class _Test:
    """A test row being read; continuation rows add GPUs and messages to it."""

    def __init__(self, category: str, name: str, line_no: int) -> None:
        self.category = category
        self.name = name
        self.line_no = line_no
        self.printed: str | None = None
        self.groups: list[str] = []
        self.all_gpus = False
        self.gpus: dict[int, str] = {}
        self.cpus: dict[int, str] = {}
        self.messages: list[tuple[str, list[str], int]] = []
        self.eud_code: int | None = None

    def messages_read(self) -> list[DcgmMessage]:
        messages = []
        for kind, chunks, line_no in self.messages:
            text = " ".join("".join(chunks).split())
            gpu = _GPU_IN_TEXT.search(text)
            named = _gpus_named(text)
            messages.append(DcgmMessage(kind, text, int(gpu[1]) if gpu else None, line_no, named))
        return messages

    def freeze(self, run_gpus: frozenset[int]) -> DcgmTest:
        if self.printed is not None:
            verdict = self.printed
        else:
            verdict = max(self.groups, key=_SEVERITY.__getitem__)
        messages = self.messages_read()
        gpus = dict(self.gpus)
        if self.all_gpus:
            # "Pass - All" / "Fail - All": DCGM's verdict for every GPU of the run.
            gpus = dict.fromkeys(sorted(run_gpus), self.groups[0])
        elif self.printed in ("Fail", "Warn") and not gpus and not self.cpus:
            # A bare 3.x verdict names no GPU: its Warning/Error text does, wrapped or not.
            named = (g for m in messages if m.kind != "Info" for g in m.gpus)
            gpus = dict.fromkeys(sorted(set(named)), self.printed)
        return DcgmTest(
            category=self.category,
            name=self.name,
            verdict=verdict,
            all_gpus=self.all_gpus,
            gpus=gpus,
            cpus=dict(self.cpus),
            messages=tuple(messages),
            eud_code=self.eud_code,
            line_no=self.line_no,
        )


def _gpus_named(text: str) -> tuple[int, ...]:
    named: list[int] = []
    for match in _GPU_LIST_IN_TEXT.finditer(text):
        for part in re.split(r"\s*,\s*|\s+and\s+", match[1]):
            if int(part) not in named:
                named.append(int(part))
    return tuple(named)


def _cells(line: str, line_no: int) -> tuple[str, str]:
    """(name column stripped, info column with its padding) of a `| a | b |` row."""
    if not (line.startswith("|") and line.endswith("|")) or line.count("|") < 3:
        raise ParseError("expected a '| name | result |' table row", line_no=line_no, line=line)
    inner = line[1:-1]
    name, _, info = inner.partition("|")
    # The info cell is " " + text padded to 46 + " "; keep inner spaces of wrapped text.
    return name.strip(), info[1:] if info.startswith(" ") else info


@parser(
    "dcgmi-diag",
    "dcgmi diag -r N: per-test and per-GPU verdicts, warning messages",
    start=(
        r"^(?:Successfully ran diagnostic|\+-{5,}\+-{5,}\+\s*$"
        r"|\|\s*Diagnostic\s+\|\s*Result\s+\|)"
    ),
)
def parse_dcgmi_diag(text: str) -> DcgmDiag:
    """Parse the table `dcgmi diag -r N` prints (DCGM 3.x or 4.x)."""
    lines = [line.rstrip() for line in text.splitlines()]
    i = 0
    note = noise_recorder()
    while i < len(lines) and (not lines[i].strip() or lines[i].strip() in _PREAMBLE):
        if note is not None and lines[i].strip():
            note(i + 1)
        i += 1
    if i >= len(lines):
        raise ParseError("expected the dcgmi diag table; the input is empty")
    if _BORDER.match(lines[i]):
        header_no = i + 1
    elif _HEADER_ROW.match(lines[i]):
        header_no = i  # copied from the header down, the top border left behind
    else:
        raise ParseError(
            "expected the dcgmi diag table border '+----...+----...+'",
            line_no=i + 1,
            line=lines[i],
        )
    if header_no >= len(lines):
        raise ParseError("expected the '| Diagnostic | Result |' header after the border")
    name, info = _cells(lines[header_no], header_no + 1)
    if (name, info.strip()) != ("Diagnostic", "Result"):
        raise ParseError(
            "expected the '| Diagnostic | Result |' header",
            line_no=header_no + 1,
            line=lines[header_no],
        )
    if header_no + 1 >= len(lines) or not _HEADER_RULE.match(lines[header_no + 1]):
        raise ParseError(
            "expected the '+====+====+' rule under the header",
            line_no=min(header_no + 2, len(lines)),
            line=lines[header_no + 1] if header_no + 1 < len(lines) else None,
        )

    category: str | None = None
    metadata: dict[str, str] = {}
    tests: list[_Test] = []
    current: _Test | None = None
    message_open = False
    seen_4x = seen_3x = False
    closed_at: int | None = None
    for idx in range(header_no + 2, len(lines)):
        line_no, line = idx + 1, lines[idx]
        if closed_at is not None:
            if line.strip():
                raise ParseError("expected nothing after the table", line_no=line_no, line=line)
            continue
        if not line.strip():
            raise ParseError("expected a table row, found a blank line", line_no=line_no)
        cat = _CATEGORY.match(line)
        if cat is not None:
            category = cat["name"]
            current, message_open = None, False
            continue
        if _BORDER.match(line):
            closed_at = line_no
            continue
        if category is None:
            raise ParseError(
                "expected a category rule such as '|-----  Deployment  ----...|'",
                line_no=line_no,
                line=line,
            )
        name, info = _cells(line, line_no)
        value = info.strip()
        if category == "Metadata":
            if not name:
                raise ParseError("expected a metadata name", line_no=line_no, line=line)
            if name in metadata:
                raise ParseError(f"metadata {name!r} printed twice", line_no=line_no, line=line)
            metadata[name] = value
            continue
        if name in _MESSAGE_KINDS:
            if current is None:
                raise ParseError(
                    f"expected a test row before this {name}", line_no=line_no, line=line
                )
            current.messages.append((name, [info[:_CHUNK]], line_no))
            message_open = True
            continue
        if name:
            if any(t.category == category and t.name == name for t in tests):
                raise ParseError(f"test {name!r} printed twice", line_no=line_no, line=line)
            current = _Test(category, name, line_no)
            tests.append(current)
            message_open = False
            bare = _VERDICT_BARE.match(value)
            grouped = _VERDICT_3X.match(value)
            if bare is not None:
                current.printed = bare["verdict"]
            elif grouped is not None:
                seen_3x = True
                _add_group(current, grouped)
            else:
                raise ParseError(
                    f"expected Pass/Fail/Skip/Warn for test {name!r}, found {value!r}",
                    line_no=line_no,
                    line=line,
                )
            continue
        # A row with an empty name continues the test above it.
        if current is None:
            raise ParseError("expected a test row first", line_no=line_no, line=line)
        entity = _ENTITY.match(value)
        grouped = _VERDICT_3X.match(value)
        code = _EUD_CODE.match(value)
        if entity is not None and current.printed is not None:
            seen_4x = True
            table = current.gpus if entity["kind"] == "GPU" else current.cpus
            if int(entity["index"]) in table:
                raise ParseError(
                    f"{entity['kind']}{entity['index']} listed twice under {current.name!r}",
                    line_no=line_no,
                    line=line,
                )
            table[int(entity["index"])] = entity["verdict"]
            message_open = False
        elif grouped is not None and current.printed is None and not message_open:
            _add_group(current, grouped, line_no, line)
        elif code is not None and not message_open:
            current.eud_code = int(code["code"])
        elif message_open:
            current.messages[-1][1].append(info[:_CHUNK])
        else:
            raise ParseError(
                f"expected a GPU result or message continuation under {current.name!r}",
                line_no=line_no,
                line=line,
            )
    if seen_3x and seen_4x:
        raise ParseError("mixes DCGM 3.x 'Pass - GPUs:' rows with 4.x 'GPU0: Pass' rows")

    ids = metadata.get("GPU Device IDs Detected", "")
    device_ids = [part.strip() for part in ids.split(",") if part.strip()]
    # The GPUs of the run, for "- All": those any row or message names, and one per device
    # id in the metadata (DCGM numbers them from 0).
    run_gpus = frozenset(
        [g for t in tests for g in t.gpus]
        + [g for t in tests for m in t.messages_read() for g in m.gpus]
        + list(range(len(device_ids)))
    )
    frozen = tuple(t.freeze(run_gpus) for t in tests)
    failed = sorted({g for t in frozen for g, v in t.gpus.items() if v == "Fail"})
    verdict = max((t.verdict for t in frozen), key=_SEVERITY.__getitem__, default="Skip")
    return DcgmDiag(
        layout="4.x" if seen_4x else "3.x",
        dcgm_version=metadata.get("DCGM Version"),
        driver_version=metadata.get("Driver Version Detected"),
        gpu_device_ids=tuple(part.strip() for part in ids.split(",") if part.strip()),
        metadata=metadata,
        tests=frozen,
        verdict=verdict,
        failed_gpus=tuple(failed),
        complete=closed_at is not None,
    )


def _add_group(
    test: _Test, match: re.Match[str], line_no: int | None = None, line: str | None = None
) -> None:
    verdict = match["verdict"]
    if test.all_gpus or (match["all"] and test.groups):
        raise ParseError(
            "expected either '- All' or per-GPU groups, not both", line_no=line_no, line=line
        )
    if match["all"]:
        test.all_gpus = True
    else:
        for gpu in match["gpus"].split(", "):
            if int(gpu) in test.gpus:
                raise ParseError(f"GPU {gpu} listed twice", line_no=line_no, line=line)
            test.gpus[int(gpu)] = verdict
    test.groups.append(verdict)
