"""``gpushare audit``: every node and GPU pod of the cluster (or a snapshot) against every rule
and the running-cluster invariants GA001-GA007, printed with ``check``'s reporters.

Exit codes as ``check``: 0 nothing fails, 1 a finding fails the run (a denial; a warning too
with ``--fail-on warn``), 2 unreadable snapshot, bad config or usage, 3 the API server
refused (or an internal error).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from webhook.cli.cluster_source import cluster_options, read_state, read_workloads
from webhook.cli.common import OneLineUsage, UsageFailure, config_option, load_cli_settings, output_options, output_to
from webhook.report import FORMATS

REPORT_KINDS = ("auto", "openreports", "policyreport")


@click.command(cls=OneLineUsage)
@cluster_options
@output_options(FORMATS, "text")
@click.option("--fail-on", type=click.Choice(("deny", "warn")), help="Lowest severity that fails the run.")
@config_option()
@click.option("--write-reports", is_flag=True,
              help="Also write one report object per namespace to the cluster (OpenReports or PolicyReport).")
@click.option("--report-kind", type=click.Choice(REPORT_KINDS),
              help="Which report API to write (default: audit.reports from config, else auto: the one the "
                   "cluster serves, OpenReports first).")
@click.option("--reports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report objects to this YAML file instead of (or besides) the cluster.")
def audit(snapshot: Path | None, demo: bool, kubeconfig: Path | None, context: str | None, output: str,
          output_file: Path | None, fail_on: str | None, config: Path | None, write_reports: bool,
          report_kind: str | None, reports_file: Path | None) -> None:
    """Judge every node and GPU pod of the cluster, and its custom workloads (training jobs, Ray,
    inference services...): every rule, plus what only a running cluster can get wrong
    (over-committed or crowded cards, mixed job types, stale assignments...)."""
    from policies.audit.audit import audit_state
    from webhook.report import render
    from webhook.report.audit_report import audit_report

    settings = load_cli_settings(config)
    if write_reports and (snapshot is not None or demo):
        raise UsageFailure("--write-reports writes to a cluster; with --snapshot or --demo use --reports-file")
    state, source, _described = read_state(snapshot, demo, kubeconfig, context, settings.names)
    workloads, notes = read_workloads(snapshot, demo, kubeconfig, context, settings)
    now = time.time()
    try:
        engine_result = audit_state(state, settings, now, workloads=workloads)
    except ValueError as exc:  # the config names rules that do not exist
        raise UsageFailure(str(exc)) from None
    for note in [*notes, *engine_result.unjudged]:
        click.echo(f"gpushare: note: {note}", err=True)
    report = audit_report(engine_result, source, fail_on or settings.check.fail_on)  # type: ignore[arg-type]
    with output_to(output_file):
        render(report, output, sys.stdout, settings=settings)
        sys.stdout.flush()
    if write_reports or reports_file is not None:
        _reports(engine_result, settings, now, report_kind, write_reports, reports_file, kubeconfig, context)
    sys.exit(report.exit_code)


def _reports(result, settings, now, kind, write, path, kubeconfig, context) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from webhook.report.policy_reports import APIS, OPENREPORTS, candidates, report_objects

    chosen = kind or (settings.audit.reports if settings.audit.reports != "none" else "auto")
    api = None
    if write:
        from webhook.cli.cluster_source import custom_objects_api
        from webhook.state.report_writer import ReportWriteError, publish

        custom = custom_objects_api(kubeconfig, context)
        try:
            # The server's leader writes through the same call (webhook/serving.py).
            done = publish(custom, candidates(chosen), lambda api: report_objects(result, api, settings.audit, now),
                           clean_others=chosen == "auto")
        except ReportWriteError as exc:
            raise click.ClickException(f"cannot write reports: {exc}") from None
        if not done.api_version:
            raise click.ClickException("the cluster serves neither openreports.io/v1alpha1 Reports nor "
                                       "wgpolicyk8s.io/v1alpha2 PolicyReports; install one of the CRDs"
                                       if chosen == "auto" else
                                       f"the cluster does not serve {APIS[chosen].api_version} {APIS[chosen].kind}s; "
                                       f"install its CRD")
        api = next(a for a in APIS.values() if a.api_version == done.api_version)
        click.echo(f"gpushare: {done.describe()}", err=True)
    if path is not None:
        api = api or APIS.get(chosen, OPENREPORTS)
        objects = report_objects(result, api, settings.audit, now)
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}, sort_keys=False))
