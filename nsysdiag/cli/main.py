"""The ``nsysdiag`` command line: thin wrappers around the library's calls.

Exit codes (the same for every command): 0 success; 1 ``diff`` found a regression;
2 usage error; 3 the input cannot be read or is not a usable nsys export; 4 the export
lacks the data the command needs; 5 ``batch`` wrote its results but some report failed;
70 internal error (a bug: please report it); 75 the environment stopped the run, not the
input (disk full, file size limit, memory limit, cache removed or unwritable: fix, rerun);
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

try:  # light (no numpy or pandas): _Interrupts wraps its blocking calls
    import adbc_driver_manager._lib as _adbc_lib
except ImportError:
    _adbc_lib = None

from .. import analyses
from .._version import __version__
from ..config import cache_dir
from ..engine import threads
from ..errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_REGRESSION,
    EXIT_REPORTS_FAILED,
    EXIT_USAGE,
    MissingDataError,
    NsysdiagError,
    UsageError,
)
from ..formatting import FORMATS, dumps, format_rows, printable
from ..settings import DEFAULTS

if TYPE_CHECKING:
    from ..analyses.base import AnalysisResult
    from ..report import Report

# The modules that read traces (duckdb, pyarrow, numpy and the analyses; numba when a
# compiled loop first runs) are imported when a command runs (:func:`cli`), so that
# --version and --help start fast (tests/test_startup.py).


class Settings:
    """Options shared by every command."""

    def __init__(
        self,
        debug: bool,
        quiet: bool,
        no_cache: bool,
        cache_dir: str | None,
        nsys: str | None,
        explain: bool,
        pid: int | None = None,
    ):
        self.debug = debug
        self.quiet = quiet
        self.cache = not no_cache
        self.cache_dir = cache_dir
        self.nsys = nsys
        self.explain = explain
        self.pid = pid

    def open(self, path: str) -> Report:
        from ..report import Report

        tracer = (
            (lambda sql: echo(f"-- SQL\n{sql.strip()};", err=True)) if self.explain else None
        )
        return Report(path, cache=self.cache, cache_dir=self.cache_dir, nsys=self.nsys,
                      tracer=tracer, pid=self.pid)

    def whole_exports(self, command: str) -> dict[str, Any]:
        """The options opening each export of a command that reads several whole exports;
        ``--pid`` (one process of one export) is refused there."""
        if self.pid is not None:
            raise click.UsageError(f"--pid reads one process of one export; {command} reads "
                                   "whole exports")
        return {"cache": self.cache, "cache_dir": self.cache_dir, "nsys": self.nsys}


pass_settings = click.make_pass_decorator(Settings)


def echo(text: str, *, err: bool = False, csv: bool = False) -> None:
    """Print ``text`` with every control character shown as its escape: names come from
    the trace and must not drive the terminal (``formatting.printable``). CSV reaching a
    file or pipe is left as it is."""
    stream = sys.stderr if err else sys.stdout
    click.echo(text if csv and not stream.isatty() else printable(text), err=err)


class _Group(click.Group):
    """The top-level group. Each analysis command (one per module of
    ``nsysdiag.analyses``) is made when first asked for, which :func:`main` does inside its
    error handling: an analysis that fails to import is a bug, reported like any other (one
    line, exit 70), never a command that silently disappears or a traceback at start-up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *(n.replace("_", "-") for n in analyses.ANALYSES)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        name = cmd_name.replace("-", "_")
        if cmd_name not in self.commands and name in analyses.ANALYSES:
            self.add_command(_analysis_command(name))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of --help, each analysis with the first line of its docstring
        read from its source (:func:`nsysdiag.analyses.summary`; its command's short help):
        listing them imports none."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if cmd is None:
                rows.append((name, analyses.summary(name.replace("-", "_"))))
            elif not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


PATH_ARG = click.argument("path", type=click.Path(dir_okay=True, path_type=str))


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="nsysdiag")
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output on stderr.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the Parquet cache.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    envvar="NSYSDIAG_CACHE_DIR",
    help="Cache directory [env NSYSDIAG_CACHE_DIR; default: the user cache dir].",
)
@click.option(
    "--nsys",
    "nsys",
    type=click.Path(dir_okay=False),
    envvar="NSYSDIAG_NSYS",
    help="nsys executable used to export raw .nsys-rep/.qdrep reports [env NSYSDIAG_NSYS].",
)
@click.option("--explain", is_flag=True, help="Print every SQL statement nsysdiag runs (stderr).")
@click.option("--pid", type=click.IntRange(min=0), default=None,
              help="Read only this process of the export (one rank of a multi-process "
                   "capture): its API calls, kernels, copies, NVTX ranges and OS calls.")
@click.pass_context
def cli(
    ctx: click.Context,
    debug: bool,
    quiet: bool,
    no_cache: bool,
    cache_dir: str | None,
    nsys: str | None,
    explain: bool,
    pid: int | None,
) -> None:
    """Diagnose NVIDIA Nsight Systems traces: where does the latency tail come from?

    PATH is an `nsys export --type sqlite` file, an `nsys export --type parquetdir`
    directory, or a raw .nsys-rep/.qdrep report (exported with nsys into the cache).

    NSYSDIAG_STAGE_TIMEOUT (seconds, default 600): the longest one thread waits for
    another (a reader, a worker); past it the command stops with exit 70 and one line
    naming the stage (docs/concurrency.md).

    Exit status: 0 success; 1 diff found a regression; 2 usage error; 3 the input cannot
    be read, is not an nsys export, or changed while read; 4 the export lacks the data
    the command needs; 5 batch wrote its results but some report failed; 70 internal
    error (a bug); 75 the environment, not the input, stopped the run (disk full, file
    size limit, NSYSDIAG_MEMORY_LIMIT too small, cache unwritable or removed mid-run);
    130 interrupted (Ctrl-C).
    """
    threads.stage_timeout()  # a bad value is a usage error now, not on another thread later
    ctx.obj = Settings(debug, quiet, no_cache, cache_dir, nsys, explain, pid)
    for name in ctx.command.list_commands(ctx):
        ctx.command.get_command(ctx, name)  # imports every analysis module now
    # the modules' objects live as long as the process: the collector need not look at them
    # again (docs/performance.md)
    gc.freeze()


@cli.command()
@PATH_ARG
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_settings
def info(settings: Settings, path: str, as_json: bool) -> None:
    """Versions, GPUs, processes, time span, row counts and what was captured."""
    with settings.open(path) as rep:
        result = rep.info()
    echo(dumps(result.to_dict()) if as_json else str(result))


@cli.command()
@PATH_ARG
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--limit", type=int, default=None, help="Print at most this many rows.")
@click.option("--allow-files", is_flag=True,
              help="Let QUERY read files (read_csv, read_parquet, ...); it still writes none.")
@pass_settings
def sql(settings: Settings, path: str, query: str, fmt: str, limit: int | None,
        allow_files: bool) -> None:
    """Run QUERY over the normalized views (kernels, memcpys, api_calls, nvtx_ranges, ...).

    QUERY may hold queries only (SELECT, DESCRIBE, SUMMARIZE, ...): no COPY, ATTACH,
    INSTALL, SET or CREATE, so it never writes a file, the input and the cache included.
    It reads no file but the views unless --allow-files is given.
    """
    with settings.open(path) as rep:
        rel = rep.user_sql(query, files=allow_files)
        if rel is None:
            return
        columns = list(rel.columns)
        import duckdb

        from ..engine.database import environment_error

        try:
            rows = rel.fetchall()
        except duckdb.Error as exc:  # relations are lazy: errors can surface only now
            other = environment_error(exc, rep.cache_path)
            if other is not None:
                raise other from None
            raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
    if limit is not None:
        rows = rows[:limit]
    echo(format_rows(columns, rows, fmt), csv=fmt == "csv")


@cli.command()
@PATH_ARG
@click.option(
    "--range",
    "range_name",
    default=None,
    help="NVTX range that is the unit of latency (NAME, DOMAIN:NAME, or a numbered family "
    "such as token_#_processing); default: chosen by structure (docs/analyses/ranges.md).",
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="nvbandwidth -j JSON measured on the capture machine (link bandwidth baseline).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML report to this file.",
)
@click.option(
    "--tail-ratio",
    type=float,
    default=DEFAULTS.tail_ratio,
    show_default=True,
    help="P99/P50 above which the tail is abnormal.",
)
@click.option(
    "--elevated-ratio",
    type=float,
    default=DEFAULTS.elevated_ratio,
    show_default=True,
    help="P99/P50 above which the tail is elevated (a cause is named only with corroboration).",
)
@click.option(
    "--tail-pct",
    type=float,
    default=DEFAULTS.tail_pct,
    show_default=True,
    help="Slowest percent of units compared with the median band.",
)
@click.option(
    "--seed", type=int, default=DEFAULTS.seed, show_default=True, help="Seed of the classifier."
)
@click.option(
    "--keep-warmup",
    is_flag=True,
    help="Keep warm-up units (module loading, handle creation, JIT, first allocations, a slow "
    "start) in the tail figures; by default they are reported and left out.",
)
@pass_settings
def diagnose(
    settings: Settings,
    path: str,
    range_name: str | None,
    baseline: str | None,
    as_json: bool,
    html_out: str | None,
    tail_ratio: float,
    elevated_ratio: float,
    tail_pct: float,
    seed: int,
    keep_warmup: bool,
) -> None:
    """Diagnose the latency tail: its shape, the layer it comes from, and the evidence."""
    from ..diagnosis.engine import diagnose as run_diagnosis
    from ..render.terminal import print_diagnosis

    if not (tail_ratio > elevated_ratio >= 1.0):
        raise click.BadParameter(
            "need --tail-ratio > --elevated-ratio >= 1", param_hint="--tail-ratio"
        )
    if not 0 < tail_pct < 50:
        raise click.BadParameter("must be in (0, 50)", param_hint="--tail-pct")
    with settings.open(path) as rep:
        # NVTX ranges alone still give the units' latency and shape (the verdict says
        # what cannot be attributed without a CUDA trace)
        if not any(rep.probe.present(v) for v in ("kernels", "api_calls", "nvtx_ranges")):
            rep.probe.require("kernels", command="diagnose")
        result = run_diagnosis(
            rep,
            range_name=range_name,
            baseline=baseline,
            settings=DEFAULTS.replace(
                tail_ratio=tail_ratio, elevated_ratio=elevated_ratio, tail_pct=tail_pct, seed=seed,
                keep_warmup=keep_warmup,
            ),
        )
        if html_out:
            from ..diagnosis.timelines import collect_timelines
            from ..render.html import write_html

            write_html(result, html_out, timelines=collect_timelines(rep, result))
    if as_json:
        echo(result.to_json())
    else:
        print_diagnosis(result)


@cli.command("diff")
@click.argument("a", type=click.Path(exists=True, dir_okay=True, path_type=str))
@click.argument("b", type=click.Path(exists=True, dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit with status 1 when B regressed against A (a CI gate).",
)
@click.option(
    "--noise",
    "noise_pct",
    type=click.FloatRange(min=0, max=100, max_open=True),
    default=5.0,
    show_default=True,
    help="Relative change (percent) below which a figure is unchanged.",
)
@click.option(
    "--range",
    "range_name",
    default=None,
    help="NVTX range that is the unit of latency in both traces (default: A's unit).",
)
@pass_settings
def diff_cmd(
    settings: Settings,
    a: str,
    b: str,
    as_json: bool,
    fail_on_regression: bool,
    noise_pct: float,
    range_name: str | None,
) -> int:
    """Compare trace B against baseline A: latency, kernels, launch gaps, transfers, verdict.

    Each figure is regressed, improved or unchanged (within the noise floor); with
    --fail-on-regression the exit status is 1 when anything regressed.
    """
    from ..diff import diff as run_diff

    result = run_diff(
        a,
        b,
        noise=noise_pct / 100,
        range_name=range_name,
        **settings.whole_exports("diff"),
    )
    echo(result.to_json() if as_json else str(result))
    return EXIT_REGRESSION if (fail_on_regression and result.regressed) else 0


@cli.command()
@click.argument("exports", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (waits per rank, a timeline of "
                   "the slowest collectives) to this file.")
@click.option("-j", "--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local worker processes reading the exports (1: one export at a time, "
                   "each query on every core).")
@click.option("--dask", "dask_address", default=None, metavar="SCHEDULER_ADDRESS",
              help="Read the exports on a Dask distributed cluster instead.")
@pass_settings
def ranks(settings: Settings, exports: tuple[str, ...], as_json: bool,
          html_out: str | None, workers: int, dask_address: str | None) -> None:
    """One diagnosis over a distributed run: which rank the others wait for, and why.

    EXPORTS are the run's exports, one per rank (nsys profile -o rank%q{RANK}) or one
    holding several processes and GPUs. NCCL collectives (or, without NCCL kernels, the
    MPI collectives of nsys --trace=mpi) are paired across ranks; the rank that caused
    most of the waits is the straggler, and its own export (its process alone, where the
    export holds other ranks) is diagnosed for the cause. Exit status 4 when fewer than
    two ranks run either.
    """
    from ..diagnosis.ranks import diagnose_ranks

    result = diagnose_ranks(list(exports), workers=workers, dask=dask_address,
                            **settings.whole_exports("ranks"))
    if not result.collectives.ok:
        raise MissingDataError(
            f"ranks: {result.collectives.message}",
            hint="the ranks are paired at their NCCL kernels or MPI collectives: capture "
                 "every rank with -t cuda (or -t mpi) (nsys profile -o rank%q{RANK} ...)")
    if html_out:
        from ..render.ranks_html import write_ranks_html

        write_ranks_html(result, html_out)
    echo(result.to_json() if as_json else str(result))


@cli.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Per-report results (.parquet); findings and kernels tables go beside it.",
)
@click.option(
    "--dask",
    "dask_address",
    default=None,
    metavar="SCHEDULER_ADDRESS",
    help="Run on a Dask distributed cluster instead of local processes.",
)
@click.option(
    "-j", "--workers", type=int, default=None, help="Local worker processes [default: CPUs]."
)
@click.option("--force", is_flag=True, help="Re-diagnose reports a previous run finished.")
@click.option("--range", "range_name", default=None, help="NVTX range used as the unit.")
@pass_settings
def batch(
    settings: Settings,
    inputs: tuple[str, ...],
    output: str,
    dask_address: str | None,
    workers: int | None,
    force: bool,
    range_name: str | None,
) -> int:
    """Diagnose many reports (files, directories, globs): one row per report, resumable.

    Each report runs in a worker process of its own: one that dies costs that report only,
    recorded with its cause; a report that crashed is retried once, then recorded as
    crashing. Failures that may pass (exit 75, 130) are retried by the next run. Exit
    status 5 when the results were written but some report failed.
    """
    from ..batch.run import run_batch

    opening = settings.whole_exports("batch")
    progress = None
    bar = None
    if not settings.quiet and sys.stderr.isatty():
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task("diagnosing", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

    try:
        summary = run_batch(
            inputs,
            output,
            force=force,
            workers=workers,
            dask=dask_address,
            range_name=range_name,
            **opening,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.stop()
    echo(str(summary))
    return EXIT_REPORTS_FAILED if summary.failed else 0


@cli.group()
def cache() -> None:
    """Inspect or clear the cache of normalized views and raw-report exports."""


@cache.command("clear")
@pass_settings
def cache_clear(settings: Settings) -> None:
    """Remove every cached view and export."""
    from pathlib import Path as _Path

    from ..batch.cache import clear_cache

    n, size = clear_cache(_Path(settings.cache_dir) if settings.cache_dir else None)
    echo(f"removed {n} files ({size / 1e6:.1f} MB)")


@cache.command("info")
@pass_settings
def cache_info(settings: Settings) -> None:
    """Where the cache is and how big."""
    from pathlib import Path as _Path

    from ..batch.cache import cache_size
    from ..config import cache_dir

    root = _Path(settings.cache_dir) if settings.cache_dir else cache_dir()
    n, size = cache_size(root)
    echo(f"{root}: {n} files, {size / 1e6:.1f} MB")


def emit_result(
    result: AnalysisResult, fmt: str, table: str | None, max_rows: int | None = None
) -> None:
    """Print an analysis result as text, CSV (one detail table) or JSON."""
    from ..analyses.base import NOT_CAPTURED

    if result.status == NOT_CAPTURED:
        raise MissingDataError(f"{result.analysis}: {result.message}")
    if fmt == "json":
        echo(result.to_json(max_rows=max_rows))
    elif fmt == "csv":
        if not result.tables:
            echo(format_rows(list(result.summary), [list(result.summary.values())], "csv"),
                 csv=True)
            return
        t = result.to_arrow(table)
        echo(format_rows(t.column_names, [tuple(r.values()) for r in t.to_pylist()], "csv"),
             csv=True)
    else:
        echo(
            str(result)
            if table is None
            else format_rows(
                result.to_arrow(table).column_names,
                [tuple(r.values()) for r in result.to_arrow(table).to_pylist()],
            )
        )


def _analysis_command(name: str) -> click.Command:
    from .options import ANALYSIS_OPTIONS

    mod = analyses.module(name)
    doc = (mod.__doc__ or name).strip()

    def callback(
        settings: Settings, path: str, fmt: str, table: str | None, max_rows: int, **options
    ) -> None:
        with settings.open(path) as rep:
            result = rep.analysis(name, **options)
        emit_result(result, fmt, table, None if max_rows <= 0 else max_rows)

    params = [
        click.Argument(["path"], type=click.Path(dir_okay=True, path_type=str)),
        click.Option(
            ["--format", "fmt"], type=click.Choice(FORMATS), default="table", show_default=True
        ),
        click.Option(
            ["--table"],
            default=None,
            help="Detail table to print (table/csv formats); default: the main one.",
        ),
        click.Option(
            ["--max-rows"],
            type=int,
            default=1000,
            show_default=True,
            help="Rows per detail table in JSON output (0: all).",
        ),
    ]
    cmd = click.Command(
        name.replace("_", "-"),
        callback=pass_settings(callback),
        params=params,
        help=doc,
        short_help=doc.splitlines()[0],
    )
    for opt in ANALYSIS_OPTIONS.get(name, ()):
        opt(cmd)
    return cmd


class _Interrupts:
    """Ctrl-C seen during the run: a failure that follows one (a reader or a query cut
    short, whatever error it surfaces as) is the interrupt's, not the input's."""

    def __init__(self) -> None:
        self.seen = False

    def __enter__(self) -> _Interrupts:
        self._old = None
        # not where SIGINT is ignored (a background job of a script) or handled by the caller
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._old = signal.signal(signal.SIGINT, self._handle)
            self._watch_adbc()
        return self

    def _watch_adbc(self) -> None:
        """ADBC (the SQLite reader) takes SIGINT itself during its blocking calls: it
        cancels the statement, which then fails with an error of its own, and Python never
        sees the signal. Its cancel callback is wrapped to note the interrupt (in
        ``_lib``, where its ``dbapi`` takes it from when imported, and in ``dbapi`` when
        it already was)."""
        modules = [m for m in (_adbc_lib, sys.modules.get("adbc_driver_manager.dbapi"))
                   if m is not None and hasattr(m, "_blocking_call")]
        self._adbc = [(m, m._blocking_call) for m in modules]
        for module, call in self._adbc:
            def blocking_call(func: Any, args: Any, kwargs: Any, cancel: Any,
                              call: Any = call) -> Any:
                def cancelled() -> None:
                    self.seen = True
                    cancel()
                return call(func, args, kwargs, cancelled)

            module._blocking_call = blocking_call

    def _handle(self, signum: int, frame: object) -> None:
        if self.seen:
            return  # the same interrupt raised again by a library (DuckDB does)
        self.seen = True
        # objects the interrupt left half made (a library's connection) fail in their
        # finalizers as the run winds down: noise after the one line that says why
        sys.unraisablehook = lambda unraisable: None
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for module, call in getattr(self, "_adbc", ()):
            module._blocking_call = call
        if self._old is not None:
            # once interrupted the run is over: an interrupt still pending (re-raised by
            # a library) must not turn the exit status into a death by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_IGN if self.seen else self._old)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning errors into one line and an exit code."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    with _Interrupts() as interrupts:
        try:
            rv = cli.main(args=args, prog_name="nsysdiag", standalone_mode=False)
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except BaseException as exc:  # noqa: BLE001 - every error becomes one line and a code
            if debug:
                traceback.print_exc()
            code = _failed(exc, args, interrupts.seen)
    sys.stdout.flush()
    return code


def _failed(exc: BaseException, args: list[str], interrupted: bool) -> int:
    """Print the one line for ``exc`` and return its exit code."""
    if isinstance(exc, click.ClickException) and not interrupted:
        exc.show()
        return exc.exit_code if exc.exit_code else EXIT_USAGE
    other: BaseException | None = exc if isinstance(exc, NsysdiagError | KeyboardInterrupt) \
        else None
    if other is None and isinstance(exc, Exception):
        from ..engine.database import environment_error  # DuckDB's: loaded only on failure

        other = environment_error(exc, _cache_root(args))
    if interrupted or isinstance(exc, click.Abort) or isinstance(other, KeyboardInterrupt):
        click.echo("nsysdiag: interrupted", err=True)
        return EXIT_INTERRUPTED
    if isinstance(other, NsysdiagError):
        echo(f"nsysdiag: error: {other.one_line()}", err=True)
        return other.exit_code
    if not isinstance(exc, Exception):
        raise exc  # SystemExit and the like pass through
    msg = " ".join(str(exc).split())[:300]  # a bug: one line unless --debug
    echo(f"nsysdiag: internal error: {type(exc).__name__}: {msg} "
         "(rerun with --debug for a traceback)", err=True)
    return EXIT_INTERNAL


def _cache_root(args: list[str]) -> Path:
    """The cache directory the arguments name (``--cache-dir``), else the default."""
    for i, arg in enumerate(args):
        if arg == "--cache-dir" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--cache-dir="):
            return Path(arg.split("=", 1)[1])
    return cache_dir()


def run() -> None:
    code = main()
    if threads.abandoned() or code == EXIT_INTERRUPTED:
        # a worker thread stuck past the stage bound (its error is printed), or one cut
        # short by Ctrl-C: the interpreter's exit would wait for it, or for the library
        # it is stuck in (and an interrupt a library left pending ended the process by
        # SIGINT instead of exit 130)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
