"""``gpushare certs issue|inject|rotate``: the webhook's CA and serving certificate.

Material lives in a directory (``--cert-dir``, what ``gpushare serve --cert-dir`` reads) or in
two Secrets in the webhook's namespace (``--secrets``, what the Deployment mounts). Errors
in input exit 2, failures talking to the cluster exit 1; both with one clear line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from webhook.cli.common import (
    ClusterFailure,
    OneLineGroup,
    OneLineUsage,
    UsageFailure,
    kubeconfig_options,
    load_cli_settings,
    with_options,
)

KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-4096")


@dataclass
class Target:
    settings: Any
    store: Any
    dns_names: list[str]
    kubeconfig: Path | None
    context: str | None
    # What else the command could be given, in its own options, when no cluster is configured.
    alternatives: str = "pass --kubeconfig FILE (and --context NAME)"
    _api: Any = None

    def api(self) -> Any:
        from webhook.cli.cluster_source import client_for

        if self._api is None:
            self._api = client_for(self.kubeconfig, self.context, self.alternatives)
        return self._api


def _common(func: Any) -> Any:
    options = [
        click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file."),
        click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Keep the material in this directory (ca.crt, ca.key, tls.crt, tls.key, ca-bundle.crt)."),
        click.option("--secrets", is_flag=True,
                     help="Keep the material in the Secrets cert_rotation.ca_secret/tls_secret of the namespace."),
        click.option("--service", help="Service name the certificate is for (default from config)."),
        click.option("--namespace", "-n", help="Namespace of the service and the Secrets (default from config)."),
        click.option("--san", multiple=True, help="Extra DNS name or IP address (repeatable)."),
        click.option("--key-type", type=click.Choice(KEY_TYPES), help="Key type (default from config: ecdsa-p256)."),
        click.option("--ca-days", type=click.IntRange(1), help="CA lifetime in days (default 3650)."),
        click.option("--cert-days", type=click.IntRange(1), help="Serving certificate lifetime in days (default 365)."),
        click.option("--inject/--no-inject", default=False,
                     help="Also patch the CA bundle into the webhook configurations."),
        *kubeconfig_options(),
    ]
    return with_options(func, options)


def _target(config: Path | None, cert_dir: Path | None, secrets: bool, service: str | None,
            namespace: str | None, san: tuple[str, ...], key_type: str | None, ca_days: int | None,
            cert_days: int | None, kubeconfig: Path | None, context: str | None) -> Target:
    from webhook.settings import CertSettings

    if (cert_dir is None) == (not secrets):
        raise UsageFailure("say where the certificates live: --cert-dir DIR or --secrets (one of them)")
    settings = load_cli_settings(config)
    overrides = {"service_name": service, "namespace": namespace, "key_type": key_type,
                 "ca_days": ca_days, "cert_days": cert_days}
    certs = CertSettings.model_validate({**settings.certs.model_dump(),
                                         **{k: v for k, v in overrides.items() if v is not None}})
    settings = settings.model_copy(update={"certs": certs})
    names = [*certs.service_dns_names(), *certs.extra_sans, *san]
    target = Target(settings, None, names, kubeconfig, context)
    if secrets:
        target.alternatives += ", or keep the material in a directory with --cert-dir DIR instead of --secrets"
    if cert_dir is not None:
        from certs.store import DirectoryStore

        target.store = DirectoryStore(cert_dir)
    else:
        from certs.store import SecretStore

        rotation = settings.cert_rotation
        target.store = SecretStore(target.api(), certs.namespace, rotation.ca_secret, rotation.tls_secret)
    return target


def _publisher(target: Target, inject: bool, mutating: str | None, validating: str | None) -> Any:
    def publish(bundle: bytes) -> None:
        if not inject:
            return
        from certs.inject import InjectError, inject_ca_bundle

        rotation = target.settings.cert_rotation
        try:
            done = inject_ca_bundle(target.api(), bundle, mutating=mutating or rotation.mutating_webhook,
                                    validating=validating or rotation.validating_webhook)
        except InjectError as exc:
            raise ClusterFailure(str(exc)) from None
        for item in done:
            click.echo(f"injected the CA bundle into {item.kind} {item.name} "
                       f"({item.changed} of {item.webhooks} webhooks changed)")
    return publish


def _run(action: Any) -> Any:
    """Run ``action`` and turn the errors it may raise into one line and an exit code."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from certs.store import CertStoreError

    try:
        return action()
    except CertStoreError as exc:
        raise UsageFailure(str(exc)) from None
    except ApiException as exc:
        raise ClusterFailure(f"the API server refused: HTTP {exc.status} {exc.reason}") from None
    except HTTPError as exc:
        from webhook.cli.cluster_source import unreachable

        raise unreachable(exc) from None
    except OSError as exc:
        raise ClusterFailure(f"cannot write the certificates: {exc}") from None


def _report(target: Target, result: Any) -> None:
    for action in result.actions:
        click.echo(f"{target.store.describe()}: {action}")
    if not result.actions:
        click.echo(f"{target.store.describe()}: up to date")
    if result.serving is not None:
        cert = result.serving.cert
        click.echo(f"serving certificate serial {cert.serial_number:x}, valid until "
                   f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")


@click.group(cls=OneLineGroup)
def certs() -> None:
    """Issue, inject and rotate the webhook's CA and serving certificate."""


@certs.command(cls=OneLineUsage)
@_common
@click.option("--overwrite", is_flag=True, help="Replace existing material (breaks trust until re-injected).")
@click.option("--mutating", help="MutatingWebhookConfiguration to inject into (default from config).")
@click.option("--validating", help="ValidatingWebhookConfiguration to inject into (default from config).")
def issue(overwrite: bool, inject: bool, mutating: str | None, validating: str | None, **options: Any) -> None:
    """Issue a new CA and a serving certificate for the service and namespace."""
    from certs.rotate import RotationRequest, rotate
    from certs.store import FreshStore

    target = _target(**options)
    settings = target.settings

    def action() -> Any:
        current = target.store.load()
        if current.ca is not None and not overwrite:
            raise UsageFailure(f"{target.store.describe()} already holds a CA; renew it without downtime with "
                               "`gpushare certs rotate`, or replace it with --overwrite")
        request = RotationRequest(target.dns_names, settings.certs, settings.cert_rotation)
        return rotate(FreshStore(target.store), request, _publisher(target, inject, mutating, validating))

    _report(target, _run(action))


@certs.command(name="inject", cls=OneLineUsage)
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file.")
@click.option("--ca-bundle", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="PEM file with the CA certificates to inject.")
@click.option("--cert-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Inject the bundle of this directory (ca-bundle.crt, else ca.crt).")
@click.option("--secrets", is_flag=True, help="Inject the bundle held in the serving Secret (ca.crt).")
@click.option("--namespace", "-n", help="Namespace of the Secrets (default from config).")
@click.option("--mutating", help="MutatingWebhookConfiguration name (default from config).")
@click.option("--validating", help="ValidatingWebhookConfiguration name (default from config).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help="Kubeconfig file.")
@click.option("--context", help="Kubeconfig context.")
def inject_command(config: Path | None, ca_bundle: Path | None, cert_dir: Path | None, secrets: bool,
                   namespace: str | None, mutating: str | None, validating: str | None,
                   kubeconfig: Path | None, context: str | None) -> None:
    """Patch the CA bundle into the named Mutating/ValidatingWebhookConfigurations."""
    if sum(x is not None and x is not False for x in (ca_bundle, cert_dir, secrets)) != 1:
        raise UsageFailure("say which bundle to inject: --ca-bundle FILE, --cert-dir DIR or --secrets (one)")
    settings = load_cli_settings(config)
    target = Target(settings, None, [], kubeconfig, context)
    bundle = _run(lambda: _read_bundle(target, ca_bundle, cert_dir, secrets, namespace))
    _run(lambda: _publisher(target, True, mutating, validating)(bundle))


def _read_bundle(target: Target, ca_bundle: Path | None, cert_dir: Path | None, secrets: bool,
                 namespace: str | None) -> bytes:
    from certs.material import load_certs
    from certs.store import CA_BUNDLE, CertStoreError, read_secret_bundle

    if secrets:
        ns = namespace or target.settings.certs.namespace
        data, source = read_secret_bundle(target.api(), ns, target.settings.cert_rotation.tls_secret)
    else:
        path = ca_bundle
        if cert_dir is not None:
            path = cert_dir / CA_BUNDLE if (cert_dir / CA_BUNDLE).exists() else cert_dir / "ca.crt"
        assert path is not None
        try:
            data, source = path.read_bytes(), str(path)
        except OSError as exc:
            raise CertStoreError(f"{path}: cannot read: {exc}") from None
    try:
        if not load_certs(data):
            raise ValueError("no certificate in it")
    except ValueError as exc:
        raise CertStoreError(f"{source}: not a PEM CA bundle: {exc}") from None
    return data


@certs.command(name="rotate", cls=OneLineUsage)
@_common
@click.option("--renew-after", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Reissue once this fraction of a certificate's lifetime has passed (default 2/3).")
@click.option("--force", is_flag=True, help="Reissue the serving certificate now.")
@click.option("--force-ca", is_flag=True, help="Renew the CA (and so the serving certificate) now.")
@click.option("--mutating", help="MutatingWebhookConfiguration to inject into (default from config).")
@click.option("--validating", help="ValidatingWebhookConfiguration to inject into (default from config).")
def rotate_command(renew_after: float | None, force: bool, force_ca: bool, inject: bool, mutating: str | None,
                   validating: str | None, **options: Any) -> None:
    """Issue what is missing and renew what is due, keeping the old CA trusted until the new one is in."""
    from certs.rotate import RotationRequest, rotate

    target = _target(**options)
    settings = target.settings
    rotation = settings.cert_rotation
    if renew_after is not None:
        rotation = rotation.model_copy(update={"renew_after_fraction": renew_after})
    request = RotationRequest(target.dns_names, settings.certs, rotation, force_serving=force, force_ca=force_ca)
    publish = _publisher(target, inject, mutating, validating)
    _report(target, _run(lambda: rotate(target.store, request, publish)))


@certs.command(name="client", cls=OneLineUsage)
@click.argument("name")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path), help="YAML config file.")
@click.option("--cert-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Sign with the CA in this directory (ca.crt, ca.key).")
@click.option("--secrets", is_flag=True, help="Sign with the CA in the Secret cert_rotation.ca_secret.")
@click.option("--namespace", "-n", help="Namespace of the Secrets (default from config).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Write NAME.crt, NAME.key and ca.crt (the bundle that verifies the webhook) here.")
@click.option("--days", type=click.IntRange(1), default=365, show_default=True, help="Lifetime in days.")
@click.option("--key-type", type=click.Choice(KEY_TYPES), help="Key type (default from config: ecdsa-p256).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help="Kubeconfig file.")
@click.option("--context", help="Kubeconfig context.")
def client_command(name: str, config: Path | None, cert_dir: Path | None, secrets: bool, namespace: str | None,
                   out_dir: Path, days: int, key_type: str | None, kubeconfig: Path | None,
                   context: str | None) -> None:
    """Issue a TLS client certificate for NAME (e.g. kube-scheduler) signed by the webhook's CA.

    The cluster deploy requires one on the scheduler extender's paths (auth.client_cert_paths,
    auth.client_names); kube-scheduler presents it through its extender tlsConfig certFile/keyFile.
    """
    from certs.issue import issue_client, write_atomic, write_pair
    from certs.material import bundle_pem

    target = _target(config, cert_dir, secrets, None, namespace, (), key_type, None, None, kubeconfig, context)

    def action() -> Any:
        current = target.store.load()
        if current.ca is None:
            raise UsageFailure(f"{target.store.describe()} holds no CA yet; run `gpushare certs rotate` first")
        issued = issue_client(current.ca, name, days, target.settings.certs.key_type)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_pair(out_dir, issued, f"{name}.crt", f"{name}.key")
        write_atomic(out_dir / "ca.crt", bundle_pem(current.ca.cert, current.previous_ca))
        return issued

    issued = _run(action)
    click.echo(f"client certificate CN={name} signed by the CA of {target.store.describe()}, valid until "
               f"{issued.cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: {out_dir / (name + '.crt')}, "
               f"{out_dir / (name + '.key')}, {out_dir / 'ca.crt'}")
