"""The `dsdoctor` command line: one entry point, one subcommand module per concern.

Heavy imports (networkx, hyperscan, jieba, flask) stay inside the command functions so that
`dsdoctor --help` and small commands start fast.
"""

from __future__ import annotations

import sys

import click

from dsdoctor.api import (
    cli_db,
    cli_diagnose,
    cli_diagnoses,
    cli_incidents,
    cli_kb,
    cli_rules,
    cli_serve,
    cli_token,
)
from dsdoctor.kb.errors import DsdoctorError, KnowledgeError


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # the version is read from the distribution's metadata only when asked: importlib.metadata
    # costs ~15 ms of every command's start-up
    if not value or ctx.resilient_parsing:
        return
    from dsdoctor.api.version import package_version

    click.echo(f"dsdoctor {package_version()}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.option("--debug", is_flag=True, help="Show the full traceback when a command fails.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """dsdoctor: diagnose failed DeepSpeed / PyTorch-distributed / NCCL training jobs.

    Evidence (logs, ds_config, metrics, versions) goes through rules into symptoms; a causal
    graph of symptoms, mechanisms and root causes ranks the causes and proposes the next
    isolation experiment. The server's data lives in DSDOCTOR_HOME (default ./var); the CLI's
    caches in the user cache directory (~/.cache/dsdoctor).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


cli.add_command(cli_serve.serve)
cli.add_command(cli_diagnose.diagnose)
cli.add_command(cli_diagnoses.diagnoses)
cli.add_command(cli_kb.kb)
cli.add_command(cli_rules.rules)
cli.add_command(cli_incidents.incidents)
cli.add_command(cli_token.token)
cli.add_command(cli_db.db)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and a non-zero exit (traceback with --debug)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        rc = cli.main(args=args, prog_name="dsdoctor", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        click.echo("dsdoctor: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KnowledgeError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        click.echo(f"dsdoctor: {len(exc.problems)} problem(s) found", err=True)
        return exc.exit_code
    except DsdoctorError as exc:
        if debug:
            raise
        click.echo(f"dsdoctor: error: {exc}", err=True)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last line of defence: never a traceback without --debug
        if debug:
            raise
        click.echo(f"dsdoctor: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True)
        return 1
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
