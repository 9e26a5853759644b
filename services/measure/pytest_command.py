"""Everything lagtrace knows about pytest: spotting a pytest command, making it write
JUnit XML and reading the per-test durations back, node ids, narrowing to one test."""

from __future__ import annotations

import configparser
import hashlib
import logging
import math
import os
import shlex
import stat
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("lagtrace.measure")

JUNIT_FILE = "junit.xml"
# The JUnit XML file is written inside the job, where its own code (a test, a conftest, a
# plugin) can write anything in its place: it is read as hostile input, streamed, within
# these limits (tests/unit/services/measure/test_junit_limits.py).
# pytest writes a few hundred bytes a case, so this is far more than JUNIT_MAX_CASES take,
# while the run directory may hold 4 GiB (settings.run_dir_max_bytes). A larger file is not
# read: the run reported no test, as when pytest wrote no file.
JUNIT_MAX_BYTES = 256 * 1024**2
# Each case is a row of test_results: the cases beyond these are dropped (and logged).
JUNIT_MAX_CASES = 200_000
# test_results.test_id is indexed (services/models.py), and a btree index entry cannot
# exceed about a third of a page, 2,704 bytes (https://www.postgresql.org/docs/current/btree-intro.html).
# Counted in UTF-8 bytes, not characters: a character takes up to four.
TEST_ID_MAX_BYTES = 1024
# pytest writes each case's time as f"{duration:.3f}" (_pytest/junitxml.py): durations
# are known to the millisecond, no better (tests/unit/test_junit_resolution.py checks).
JUNIT_RESOLUTION_S = 0.001
# pytest's exit status when the suite ran and some tests failed (ExitCode.TESTS_FAILED).
PYTEST_TESTS_FAILED = 1
# pytest's exit statuses when no test ran at all: a usage error (a node id that does not
# exist) and nothing collected (ExitCode.USAGE_ERROR, ExitCode.NO_TESTS_COLLECTED).
PYTEST_NOTHING_RAN = {4: "a usage error (is the node id right?)", 5: "no tests collected"}
# Where pytest finds its configuration, in its own order (_pytest/config/findpaths.py).
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")

# pytest options whose value is a path: the value must stay when the command's own test
# paths are swapped for one node id.
_PATH_OPTIONS = {
    "-c",
    "--rootdir",
    "--confcutdir",
    "--basetemp",
    "--ignore",
    "--ignore-glob",
    "--deselect",
    "-p",
    "--junitxml",
    "--junit-xml",
    "--log-file",
    "--cov",
    "--cov-config",
    "-o",
    "--override-ini",
    "--import-mode",
    "-k",
    "-m",
}


@dataclass(frozen=True)
class TestCase:
    __test__ = False  # not a pytest test class

    test_id: str  # pytest's node id where it can be rebuilt: tests/test_x.py::TestY::test_z
    duration_s: float
    outcome: str  # passed, failed, error, skipped
    line: int | None = None  # 1-based line of its definition (xunit1's 0-based line attribute + 1)
    # The times an evidence run's plugin ran it (services/measure/probes/amplify.py), from
    # its case's property; None where no plugin said.
    iterations: int | None = None


def is_pytest(command: list[str]) -> bool:
    """`pytest ...`, `py.test ...` or `python -m pytest ...` (any python)."""
    if not command:
        return False
    program = os.path.basename(command[0])
    if program in ("pytest", "py.test"):
        return True
    return program.startswith("python") and command[1:3] == ["-m", "pytest"]


def with_junit(command: list[str], junit_path: str) -> list[str]:
    """The user's pytest command, also writing JUnit XML (the user edits nothing).

    xunit1 adds each case's file, which turns JUnit's dotted classname back into the
    pytest node id that a rerun of one test needs. pytest's cache is off: the checkout is
    read-only in a container, where each run printed a PytestCacheWarning for every
    file it could not write, and a timing run has no use for what the cache keeps
    (https://docs.pytest.org/en/stable/how-to/cache.html). A command that reads the cache
    (``--lf``, ``--sw``) keeps it.
    """
    cache = [] if CACHE_OPTIONS & set(_arguments(command)) else ["-p", "no:cacheprovider"]
    return [*command, f"--junitxml={junit_path}", "-o", "junit_family=xunit1", *cache]


# pytest options that need its cache plugin (_pytest/cacheprovider.py, _pytest/stepwise.py).
CACHE_OPTIONS = {
    "--lf",
    "--last-failed",
    "--ff",
    "--failed-first",
    "--nf",
    "--new-first",
    "--sw",
    "--stepwise",
    "--sw-skip",
    "--stepwise-skip",
    "--cache-show",
    "--cache-clear",
    "--lfnf",
    "--last-failed-no-failures",
}


def narrow_to_test(
    command: list[str],
    node_id: str,
    workdir: Path | None,
    is_test_path: Callable[[str], bool] | None = None,
    ceiling: Path | None = None,
) -> list[str]:
    """The pytest command with its test paths replaced by one node id.

    pytest runs the union of its positional paths, so appending the node id alone would
    still run everything: existing paths among the arguments (not values of path
    options) are dropped first. Without a checkout (``workdir`` None: a rerun is planned
    before its code is fetched) paths are told apart by name: the node's own file, a
    directory holding it, or any other test module; ``is_test_path`` overrides both.
    """
    if workdir is not None:
        node_id = invocation_node_id(node_id, command, workdir, ceiling)
    else:
        node_id = _guessed_invocation_node_id(node_id, command)
    if is_test_path is None:
        is_test_path = _exists_in(workdir) if workdir is not None else _named_like_a_test_path(node_id)
        is_test_path = _with_pyargs_modules(command, [node_id], is_test_path)
    return [*_without_test_paths(command, is_test_path), node_id]


def narrow_to_tests(command: list[str], node_ids: list[str], workdir: Path, ceiling: Path | None = None) -> list[str]:
    """The pytest command with its test paths replaced by several node ids, run in the
    order given (the focused screen reruns the tests its survey could not clear)."""
    root, here = rootdir(command, workdir, ceiling), workdir.resolve()
    ids = [_relative_to(node_id, root, here) for node_id in dict.fromkeys(node_ids)]
    is_test_path = _with_pyargs_modules(command, ids, _exists_in(workdir))
    return [*_without_test_paths(command, is_test_path), *ids]


def _with_pyargs_modules(
    command: list[str], node_ids: list[str], is_test_path: Callable[[str], bool]
) -> Callable[[str], bool]:
    """Under `--pyargs jsonschema.tests.test_validators`, a module the nodes' files live in
    is a test path too: it would otherwise still be collected whole beside them (a drilled
    simplejson test ran the whole suite under strace until the 30 s timeout, a false stall)."""
    if "--pyargs" not in command:
        return is_test_path
    files = ["/" + node.split("::", 1)[0].removesuffix(".py") + "/" for node in node_ids]

    def with_modules(argument: str) -> bool:
        dotted = "/" + argument.replace(".", "/") + "/"
        return is_test_path(argument) or any(dotted in file for file in files)

    return with_modules


def _without_test_paths(command: list[str], is_test_path: Callable[[str], bool]) -> list[str]:
    kept: list[str] = []
    previous = ""
    for argument in command:
        is_value = previous in _PATH_OPTIONS
        path_part = argument.split("::", 1)[0]
        if kept and not argument.startswith("-") and not is_value and is_test_path(path_part):
            previous = argument
            continue
        kept.append(argument)
        previous = argument
    return kept


def invocation_node_id(node_id: str, command: list[str], workdir: Path, ceiling: Path | None = None) -> str:
    """``node_id`` as an argument given in ``workdir``: pytest's node ids (and its JUnit
    file attribute) are relative to its rootdir, which is not the working directory when a
    pytest.ini (or another configuration file) sits in a subfolder the command names, or
    in a folder above it (``ceiling``)."""
    return _relative_to(node_id, rootdir(command, workdir, ceiling), workdir.resolve())


def search_ceiling(executor: str) -> Path | None:
    """How far up from the working directory pytest's rootdir can be: on the host (the
    local executor) as far as pytest itself looks, to ``/`` (a suite in a subfolder of a
    repository whose pyproject.toml configures pytest); in a container only the checkout
    is mounted, so no further than the working directory."""
    return Path("/") if executor == "local" else None


def _relative_to(node_id: str, root: Path, here: Path) -> str:
    if root == here:
        return node_id
    path, sep, rest = node_id.partition("::")
    return os.path.relpath(root / path, here) + sep + rest


def _guessed_invocation_node_id(node_id: str, command: list[str]) -> str:
    """``node_id`` as an argument, without the checkout (a rerun is planned before its code
    is fetched): the rootdir is what --rootdir or -c names, or the part of a test path the
    command names that comes before the node's own path ("service/tests" and
    "tests/test_x.py::t": rootdir "service"). Otherwise the rootdir is taken to be the
    working directory."""
    arguments = _arguments(command)
    path, sep, rest = node_id.partition("::")
    named = _option(arguments, "--rootdir")
    config = _option(arguments, "-c", "--config-file", "--inifile")
    root = named if named is not None else os.path.dirname(config) if config is not None else None
    if root is None:
        node_parts = Path(path).parts
        previous = ""
        for argument in arguments:
            if argument.startswith("-") or previous in _PATH_OPTIONS:
                previous = argument
                continue
            previous = argument
            parts = Path(argument.split("::", 1)[0]).parts
            for cut in range(1, len(parts)):  # parts[cut:] is where the node's path begins
                tail = parts[cut:]
                if tail == node_parts[: len(tail)]:
                    root = str(Path(*parts[:cut]))
                    break
            if root is not None:
                break
    if not root or os.path.normpath(root) == ".":
        return node_id
    return os.path.normpath(os.path.join(root, path)) + sep + rest


def rootdir(command: list[str], workdir: Path, ceiling: Path | None = None) -> Path:
    """The rootdir pytest will pick for ``command`` run in ``workdir``, by pytest's own rules
    (--rootdir, -c, the first configuration file above the arguments' common ancestor,
    setup.py, the working directory), reading files only: no code of the job runs here.
    The search stops at ``ceiling`` (default ``workdir``: above it, the container's
    directories are not the host's)."""
    here = workdir.resolve()
    top = (ceiling or workdir).resolve()
    if not here.is_relative_to(top):
        top = here
    arguments = _arguments(command)
    named = _option(arguments, "--rootdir")
    if named is not None:
        return _inside(top, here / os.path.expandvars(named))
    config = _option(arguments, "-c", "--config-file", "--inifile")
    if config is not None and (here / config).is_file():
        return _inside(top, (here / config).parent)
    dirs = []
    previous = ""
    for argument in arguments:
        if not argument.startswith("-") and previous not in _PATH_OPTIONS:
            path = _inside(top, here / argument.split("::", 1)[0])
            if path.exists():
                dirs.append(path if path.is_dir() else path.parent)
        previous = argument
    ancestor = Path(os.path.commonpath(dirs)) if dirs else here
    bases = [ancestor, *(parent for parent in ancestor.parents if parent.is_relative_to(top))]
    pyproject = None
    for base in bases:
        for name in CONFIG_FILES:
            if _has_pytest_config(base / name):
                return base
            if name == "pyproject.toml" and pyproject is None and (base / name).is_file():
                pyproject = base
    if pyproject is not None:
        return pyproject
    for base in bases:
        if (base / "setup.py").is_file():
            return base
    return here


def config_addopts(command: list[str], workdir: Path, ceiling: Path | None) -> list[str]:
    """The addopts of the configuration file pytest reads for ``command`` in ``workdir``
    (services/measure/pytest_workers.py reads pytest-xdist's workers in them); raises
    ValueError where its quotes do not balance."""
    here = workdir.resolve()
    config = _option(_arguments(command), "-c", "--config-file", "--inifile")
    if config is not None:
        path = _inside((ceiling or workdir).resolve(), here / config)
        candidates = [path] if path.is_file() else []
    else:
        base = rootdir(command, workdir, ceiling)
        candidates = [base / name for name in CONFIG_FILES if _has_pytest_config(base / name)]
    for path in candidates[:1]:
        try:
            text = path.read_text(errors="replace")
            if path.name.endswith(".toml"):
                tool = tomllib.loads(text).get("tool", {})
                section = tool.get("pytest", {}) if isinstance(tool, dict) else {}
                options = section.get("ini_options", section) if isinstance(section, dict) else {}
                value = options.get("addopts", "") if isinstance(options, dict) else ""
                return [str(v) for v in value] if isinstance(value, list) else shlex.split(str(value))
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            parser.read_string(text)
        except (tomllib.TOMLDecodeError, configparser.Error, OSError, UnicodeDecodeError):
            return []
        for name in ("pytest", "tool:pytest"):
            if parser.has_option(name, "addopts"):
                return shlex.split(parser.get(name, "addopts"))
    return []


def _arguments(command: list[str]) -> list[str]:
    program = os.path.basename(command[0]) if command else ""
    return command[1:] if program in ("pytest", "py.test") else command[3:]


def _option(arguments: list[str], *names: str) -> str | None:
    found = None
    for index, argument in enumerate(arguments):
        for name in names:
            if argument == name and index + 1 < len(arguments):
                found = arguments[index + 1]
            elif argument.startswith(name + "="):
                found = argument[len(name) + 1 :]
    return found


def _inside(top: Path, path: Path) -> Path:
    """``path`` resolved, or ``top`` when it leads out of the checkout (a hostile link)."""
    resolved = path.resolve()
    return resolved if resolved.is_relative_to(top) else top


def _has_pytest_config(path: Path) -> bool:
    if not path.is_file() or path.is_symlink():
        return False
    if path.name in ("pytest.ini", ".pytest.ini"):
        return True  # even empty: pytest takes these whatever they hold
    try:
        text = path.read_text(errors="replace")
        if path.name == "pyproject.toml":
            tool = tomllib.loads(text).get("tool", {})
            return isinstance(tool, dict) and isinstance(tool.get("pytest"), dict)
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read_string(text)
    except (tomllib.TOMLDecodeError, configparser.Error, OSError, UnicodeDecodeError):
        return False
    return parser.has_section("pytest" if path.name == "tox.ini" else "tool:pytest")


# How a pytest run failed as a whole, beyond its exit code: the command_failed rule's
# kinds (part of its fingerprint: a suite that collects nothing and one that cannot
# import a module are two problems).
COLLECTION_ERROR, NO_TESTS, USAGE_ERROR = "collection_error", "no_tests_collected", "usage_error"


def suite_failure(exit_code: int | None, output_tail: str | None, cases: int) -> str | None:
    """Why a pytest run of the suite ran no test at all, where every further run would
    only say the same: a collection error that interrupted it (exit 2; exit 1 with
    ``--continue-on-collection-errors`` and nothing else), no test collected (exit 5), or
    a usage error (exit 4: a path or option that does not exist). None: it ran tests."""
    if exit_code in (1, 2) and read_collection_errors(output_tail) and cases == 0:
        return COLLECTION_ERROR
    if exit_code == 5:
        return NO_TESTS
    if exit_code == 4:
        return USAGE_ERROR
    return None


def nothing_ran(exit_code: int | None, test_id: str) -> str | None:
    """Why a pytest run narrowed to ``test_id`` observed nothing of it (pytest stopped
    before running any test), or None. A run that timed out or crashed is not this: its
    snapshots show where the test was."""
    if exit_code in PYTEST_NOTHING_RAN:
        return f"pytest exited {exit_code}, {PYTEST_NOTHING_RAN[exit_code]}: {test_id} did not run"
    return None


def _exists_in(workdir: Path) -> Callable[[str], bool]:
    return lambda path: (workdir / path).exists()


def _named_like_a_test_path(node_id: str) -> Callable[[str], bool]:
    node_path = node_id.split("::", 1)[0]
    return lambda path: (
        path.endswith(".py") or path.rstrip("/") in (".", "") or node_path.startswith(path.rstrip("/") + "/")
    )


@dataclass(frozen=True)
class CollectionError:
    """A test module pytest could not collect (import it, or parse it): no test of it ran."""

    module: str  # its path, pytest's node id of the module
    exception: str  # the exception's last line: "ModuleNotFoundError: No module named 'x'"


# pytest's JUnit XML has a collection error as an error element with this message
# (_pytest/junitxml.py, append_collect_error), in a testcase named after the module.
COLLECTION_FAILURE = "collection failure"
# How a run's output tail names them (runs.py writes it, the command_failed rule reads it).
COLLECTION_ERROR_LINE = "lagtrace: pytest could not collect "


def read_junit(path: Path) -> tuple[list[TestCase], list[CollectionError]]:
    """A JUnit XML file's test cases and the modules pytest could not collect, read once (a
    run's report is read this way: parse and collection_errors each read the file)."""
    read = _cases(path)
    return _test_cases(read), _collection_errors(read)


def parse(path: Path) -> list[TestCase]:
    """The test cases of a JUnit XML file; a module that failed to collect is no test case
    (collection_errors reads those)."""
    return _test_cases(_cases(path))


def _test_cases(read: list[_Case]) -> list[TestCase]:
    cases: list[TestCase] = []
    for case in read:
        if case.collection_failure is None:
            duration = _duration(case.attrib.get("time"))
            cases.append(TestCase(_node_id(case), duration, case.outcome or "passed", _line(case), _iterations(case)))
    return cases


# The property the amplify plugin sets on its test's case (services/measure/probes/amplify.py).
ITERATIONS_PROPERTY = "lagtrace_iterations"


def _iterations(case: _Case) -> int | None:
    return _count(case.iterations)


def _duration(time: str | None) -> float:
    """A case's ``time`` attribute in seconds, as junitparser read it ("1,234.5" is
    1234.5 s), or 0.0 where it is no duration: not a number ("abc"), not finite ("nan",
    "inf") or negative. The job's code writes the file: such a value is unknown, never
    a crash of the job nor a number a statistic takes
    (tests/unit/services/measure/test_junit_limits.py)."""
    try:
        duration = float((time or "0").replace(",", ""))
    except ValueError:
        return 0.0
    return duration if math.isfinite(duration) and duration >= 0 else 0.0


# The largest line or iteration count read: test_results.line is a 32-bit integer column
# (services/models.py), and a count of more digits is no count pytest writes.
_COUNT_MAX = 2**31 - 1


def _count(value: str | None) -> int | None:
    """A non-negative count written in ASCII digits, or None: ``str.isdigit`` also takes
    "²" (superscript two), which ``int`` refuses, and 5,000 digits, which ``int`` refuses
    too (sys.set_int_max_str_digits)."""
    if not value or not value.isascii() or not value.isdigit() or len(value) > len(str(_COUNT_MAX)):
        return None
    count = int(value)
    return count if count <= _COUNT_MAX else None


def collection_errors(path: Path) -> list[CollectionError]:
    """The modules pytest could not collect, each with the exception it raised."""
    return _collection_errors(_cases(path))


def _collection_errors(read: list[_Case]) -> list[CollectionError]:
    found = []
    for case in read:
        if case.collection_failure is not None:
            module = case.attrib.get("file") or case.attrib.get("name") or "?"
            found.append(CollectionError(_bounded(module), _exception_line(case.collection_failure)))
    return found


def describe_collection_errors(errors: list[CollectionError]) -> str:
    """The lines a run's output tail starts with: each module and its exception (the tail of
    pytest's own output rarely reaches the first module's exception)."""
    return "".join(f"{COLLECTION_ERROR_LINE}{error.module}: {error.exception}\n" for error in errors)


def read_collection_errors(output_tail: str | None) -> list[CollectionError]:
    """What describe_collection_errors wrote into an output tail."""
    found = []
    for line in (output_tail or "").splitlines():
        if line.startswith(COLLECTION_ERROR_LINE):
            module, _, exception = line.removeprefix(COLLECTION_ERROR_LINE).partition(": ")
            found.append(CollectionError(module, exception))
    return found


@dataclass
class _Case:
    """What parse and collection_errors read of one testcase element."""

    attrib: dict[str, str]
    outcome: str | None = None  # that of its first skipped, failure or error element
    # The text of its first error element whose message is COLLECTION_FAILURE.
    collection_failure: str | None = None
    iterations: str | None = None  # the value of its ITERATIONS_PROPERTY property


_OUTCOMES = {"skipped": "skipped", "failure": "failed", "error": "error"}


class _Unreadable(Exception):
    """A JUnit XML file that is read as no test case."""


class _Enough(Exception):
    """A case beyond JUNIT_MAX_CASES begins."""


class _Reader:
    """The target of ElementTree's XMLParser, told of each tag as the file is fed
    (https://docs.python.org/3/library/xml.etree.elementtree.html#xmlparser-objects): it keeps
    what parse and collection_errors read of each case and builds no tree. Not iterparse:
    that reports no DOCTYPE, while a target's doctype method is told of one."""

    def __init__(self) -> None:
        self.cases: list[_Case] = []
        self.open: list[str] = []  # the tags of the open elements, the root's first
        self.case: _Case | None = None  # the case being read, an element at depth case_depth
        self.case_depth = 0
        self.text: list[str] | None = None  # a collection failure's text, while it is read
        self.text_depth = 0

    def doctype(self, name: str, pubid: str | None, system: str | None) -> None:
        # pytest writes none. A DOCTYPE can declare entities, which Python's parser expands
        # (the "billion laughs": https://docs.python.org/3/library/xml.html#xml-vulnerabilities).
        raise _Unreadable(f"it declares a DOCTYPE ({name})")

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        depth = len(self.open)
        self._end_text()  # an element's text is what comes before its first child
        if self.case is None:
            # The cases junitparser read: those of the root testsuite, of the root
            # testsuites' testsuites, and of testsuites nested in those (in document order).
            in_suites = self.open[:1] in (["testsuites"], ["testsuite"]) and self.open[-1] == "testsuite"
            if tag == "testcase" and in_suites and all(t == "testsuite" for t in self.open[1:]):
                if len(self.cases) == JUNIT_MAX_CASES:
                    raise _Enough
                self.case, self.case_depth = _Case(attrib), depth
        elif tag in _OUTCOMES:
            self.case.outcome = self.case.outcome or _OUTCOMES[tag]
            if tag == "error" and attrib.get("message") == COLLECTION_FAILURE and self.case.collection_failure is None:
                self.text, self.text_depth = [], depth
        elif (
            tag == "property"
            and attrib.get("name") == ITERATIONS_PROPERTY
            and self.open[self.case_depth + 1 :] == ["properties"]  # the case's properties/property
            and self.case.iterations is None
        ):
            self.case.iterations = attrib.get("value", "")
        self.open.append(tag)

    def data(self, text: str) -> None:
        if self.text is not None:
            self.text.append(text)

    def end(self, tag: str) -> None:
        self.open.pop()
        if self.text is not None and len(self.open) == self.text_depth:
            self._end_text()
        if self.case is not None and len(self.open) == self.case_depth:
            self.cases.append(self.case)
            self.case = None

    def _end_text(self) -> None:
        if self.text is not None and self.case is not None:
            self.case.collection_failure = "".join(self.text)
        self.text = None


def _cases(path: Path) -> list[_Case]:
    """The cases of a JUnit XML file, or none when it cannot be read safely."""
    try:
        return _read(path)
    except FileNotFoundError:
        return []
    except (OSError, _Unreadable, ET.ParseError, LookupError, ValueError) as exc:
        # A declared encoding Python does not have is a LookupError, one expat cannot
        # use a ValueError (UnicodeError among them).
        log.warning("JUnit XML %s not read, as if no test ran: %s", path, exc)
        return []


def _read(path: Path) -> list[_Case]:
    # Not through a link, and only a regular file: a FIFO would never end (as executors/local.py _tail).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable("not a regular file")
        if info.st_size > JUNIT_MAX_BYTES:
            raise _Unreadable(f"{info.st_size} bytes, over the {JUNIT_MAX_BYTES} read")
        reader = _Reader()
        parser = ET.XMLParser(target=reader)
        read = 0
        try:
            while chunk := handle.read(64 * 1024):
                read += len(chunk)
                if read > JUNIT_MAX_BYTES:  # it grew since
                    raise _Unreadable(f"over the {JUNIT_MAX_BYTES} bytes read")
                parser.feed(chunk)
            if read:  # an empty file is no case, as pytest leaves none
                parser.close()
        except _Enough:
            log.warning("JUnit XML %s: only its first %d test cases are read", path, JUNIT_MAX_CASES)
    return reader.cases


def _exception_line(text: str) -> str:
    """The exception pytest shows last (its "E   " lines), else the text's last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    raised = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (raised or lines or ["(no message)"])[-1]


def _node_id(case: _Case) -> str:
    classname = case.attrib.get("classname") or ""
    name = case.attrib.get("name") or ""
    file = case.attrib.get("file")
    if file:
        module = file[:-3].replace("/", ".") if file.endswith(".py") else file
        rest = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
        classes = rest.split(".") if rest else []
        return _bounded("::".join([file, *classes, name]))
    return _bounded(f"{classname}::{name}" if classname else name)


def _bounded(test_id: str) -> str:
    """``test_id`` within TEST_ID_MAX_BYTES: a longer one is cut and ends in a hash of the
    whole, so that two ids alike in their first kilobyte stay two tests."""
    encoded = test_id.encode()
    if len(encoded) <= TEST_ID_MAX_BYTES:
        return test_id
    suffix = "…" + hashlib.sha256(encoded).hexdigest()[:16]
    # errors="ignore": the cut may split a character's bytes.
    return encoded[: TEST_ID_MAX_BYTES - len(suffix.encode())].decode(errors="ignore") + suffix


def _line(case: _Case) -> int | None:
    line = _count(case.attrib.get("line"))
    return line + 1 if line is not None and line < _COUNT_MAX else None
