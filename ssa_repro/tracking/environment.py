"""W&B's environment and the start-up checks: offline without a byte on the network, online failing fast.

Modes (``logger.mode``): ``offline`` (default), ``online``, ``disabled``.

- **offline / disabled: no network.** wandb decides on its usage telemetry from its *global* settings,
  which come from the environment, not from ``wandb.init(mode=...)``: with ``WANDB_MODE`` unset a run
  started with ``mode="offline"`` still builds an OpenTelemetry exporter that resolves the W&B host
  (a DNS query on port 53). :func:`configure_environment` therefore sets ``WANDB_MODE`` to the resolved
  mode and, for every mode but ``online``, ``WANDB_ERROR_REPORTING=false`` (turns the Python-side
  telemetry recorder off and starts wandb-core with ``--no-observability``). If wandb was already
  imported, its process-wide telemetry switch is turned off as well. Nothing else is needed in wandb
  0.31: offline, wandb-core's CoreWeave metadata probe has no GraphQL client, and system metrics are
  read locally.
- **online: fail fast.** :func:`check` (called from start-up validation, before the run folder is
  created) reports a missing API key (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE`` or a netrc
  entry for the W&B host), a W&B host that cannot be reached within a few seconds, and a key the
  server does not accept or a host that is not a W&B server: one authenticated request (W&B's GraphQL
  ``viewer`` query, the one ``wandb login`` makes) must return the key's user. There is no
  silent fall-back to offline: a run asked to be online that quietly is not would be lost from the
  dashboard; the message says how to run offline instead.

``wandb`` is never imported at this module's top: :func:`configure_environment` sets the variables
wandb reads at import/setup time first.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import netrc
import os
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from ssa_repro.core.enums import value_of

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
TAG_LEN = 64  # W&B refuses a tag longer than this (a pydantic error at wandb.init)
NAME_LEN = 128  # W&B's limit for a project name
FORBIDDEN = "/\\#?%:"  # characters W&B refuses in project and entity names
DEFAULT_BASE_URL = "https://api.wandb.ai"


# --------------------------------------------------------------------------------------------------
# Environment and start-up checks


def configure_environment(mode) -> str:
    """Set wandb's environment for ``mode`` (before wandb is imported, where possible); returns the mode.

    ``WANDB_MODE`` becomes the resolved mode, so wandb's global settings (which decide on telemetry)
    agree with the run. For every mode but ``online`` its telemetry and error reporting are switched
    off (``WANDB_ERROR_REPORTING=false``). Idempotent.
    """
    mode = value_of(mode)
    if mode not in MODES:
        raise ValueError(f"W&B mode {mode!r} is not one of {', '.join(MODES)}")
    os.environ["WANDB_MODE"] = mode
    if mode != "online":
        os.environ["WANDB_ERROR_REPORTING"] = "false"
        if "wandb" in sys.modules:
            _disable_loaded_telemetry()
    return mode


def _disable_loaded_telemetry() -> None:
    """wandb was imported before the environment was set: turn its process-wide telemetry off too."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy

        opentelemetry_proxy.disable()
    except Exception:  # an internal module of wandb; its absence must not stop a run
        log.debug("could not switch off wandb telemetry after import", exc_info=True)


def check(logger_cfg, timeout: float = 5.0) -> list[str]:
    """Problems with the W&B set-up, found before any work starts (empty when all is well).

    An unknown ``WANDB_MODE`` in the environment is reported naming the variable, its value and the
    allowed values (``logger.mode`` defaults to it, and wandb's own tools read it). For
    ``logger.mode=online`` the API key and the server are checked (:func:`check_online`).
    """
    out = []
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode is not None and env_mode not in MODES:
        out.append(
            f"environment variable WANDB_MODE={env_mode!r} is not a W&B mode; allowed: {', '.join(MODES)} "
            "(unset it to log offline, or set it to one of these)"
        )
    try:
        mode = value_of(logger_cfg.mode)
    except Exception:  # the YAML default ${oc.env:WANDB_MODE,offline} failed on the value reported above
        return out or [f"logger.mode could not be resolved; allowed: {', '.join(MODES)}"]
    if mode not in MODES:
        out.append(f"logger.mode={mode!r} is not a W&B mode; allowed: {', '.join(MODES)}")
        return out
    if mode != "disabled":
        out += name_problems(logger_cfg)
    if mode == "online" and not out:
        out += check_online(logger_cfg, timeout=timeout)
    return out


def name_problems(logger_cfg) -> list[str]:
    """Tags, project and entity that wandb.init would refuse (offline too), each naming the key, the value
    and W&B's rule."""
    out = []
    for i, tag in enumerate(getattr(logger_cfg, "tags", None) or []):  # (a bare namespace has none)
        if not 1 <= len(str(tag)) <= TAG_LEN:
            out.append(
                f"logger.tags[{i}]={str(tag)[:40]!r}{'…' if len(str(tag)) > 40 else ''} has {len(str(tag))} "
                f"characters; W&B allows 1 to {TAG_LEN} per tag"
            )
    for key in ("project", "entity"):  # (wandb checks the project's name itself; an entity is in URLs)
        value = getattr(logger_cfg, key, None)
        if value is not None and (
            any(c in FORBIDDEN for c in str(value)) or not 1 <= len(str(value)) <= NAME_LEN
        ):
            out.append(
                f"logger.{key}={str(value)!r} is not a W&B {key} name (1 to {NAME_LEN} characters, none of "
                f"{' '.join(FORBIDDEN)})"
            )
    return out


def check_online(logger_cfg=None, timeout: float = 5.0, hint: str | None = None) -> list[str]:
    """Problems that would make an online run fail or hang: no API key, the W&B host unreachable, a key
    the server refuses, a host that is not a W&B server.

    The key is looked up where wandb looks (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, a netrc
    entry for the host); the host (``WANDB_BASE_URL``, default ``https://api.wandb.ai``) is only contacted
    when a key is present: a TCP connection, then the key checked with one ``viewer`` query
    (:func:`credentials_problem`; not for an identity token, which wandb exchanges itself), each bounded
    by ``timeout`` seconds (DNS included).
    """
    base_url = os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    offline_hint = hint or "or run with logger.mode=offline and upload later with `wandb sync`"
    who = "logger.mode=online" if hint is None else "W&B"  # (the dashboard has no logger.mode)
    but = f"{who} but" if hint is None else f"{who}:"
    if not _have_api_key(base_url):
        return [
            f"{who} needs a W&B API key for {base_url} and none was found: set WANDB_API_KEY, "
            f"or run `wandb login` (writes ~/.netrc), {offline_hint}"
        ]
    why = reachability_problem(base_url, timeout)
    if why:
        return [f"{but} the W&B server {base_url} is not reachable ({why}); {offline_hint}"]
    key = _api_key(base_url)
    why = credentials_problem(base_url, key, timeout) if key else None  # (an identity token: TCP only)
    if why:
        return [f"{but} {why}; {offline_hint}"]
    return []


VIEWER_QUERY = "query Viewer { viewer { id username } }"


def credentials_problem(base_url: str, key: str, timeout: float = 5.0) -> str | None:
    """None if the W&B server at ``base_url`` answers the ``viewer`` query authenticated with ``key``
    (HTTP basic auth, user ``api``, as wandb does) with a user, within ``timeout`` s; else why not.
    Like :func:`reachability_problem`, the request runs in a daemon thread abandoned after ``timeout``."""
    url = base_url.rstrip("/") + "/graphql"
    auth = base64.b64encode(f"api:{key}".encode()).decode()
    request = urllib.request.Request(
        url,
        data=json.dumps({"query": VIEWER_QUERY}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Basic {auth}"},
        method="POST",
    )
    not_wandb = f"{base_url} is not a W&B server (check WANDB_BASE_URL)"
    result: list[str | None] = []

    def attempt() -> None:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body = answer.read(1 << 20)
            viewer = (json.loads(body).get("data") or {}).get("viewer")
            result.append(None if viewer else f"the W&B server {base_url} knows no user for this API key")
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                result.append(
                    f"the W&B server {base_url} refused the API key (HTTP {e.code}): check WANDB_API_KEY "
                    "or run `wandb login --relogin`"
                )
            else:
                result.append(f"{not_wandb}: it answered HTTP {e.code} {e.reason} to W&B's viewer query")
        except (ValueError, AttributeError):  # not JSON, or JSON of another shape
            result.append(f"{not_wandb}: it did not answer W&B's viewer query with W&B's JSON")
        except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, not HTTP
            reason = getattr(e, "reason", None) or e
            result.append(f"{not_wandb}: no HTTP answer to W&B's viewer query ({reason})")

    thread = threading.Thread(target=attempt, name="wandb-credentials", daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"{not_wandb}: no answer to W&B's viewer query within {timeout:g} s"
    return result[0]


def _have_api_key(base_url: str) -> bool:
    return bool(_api_key(base_url) or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"))


def _api_key(base_url: str) -> str | None:
    """The API key wandb would use: ``WANDB_API_KEY``, else the netrc password for the host."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    host = urlparse(base_url).hostname or ""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        auth = netrc.netrc(str(path)).authenticators(host) if path.exists() else None
    except (netrc.NetrcParseError, OSError):
        return None
    return auth[2] if auth and auth[2] else None


def reachability_problem(base_url: str, timeout: float = 5.0) -> str | None:
    """None if a TCP connection to the URL's host and port opens within ``timeout`` s, else why not.

    Name resolution cannot be interrupted, so the attempt runs in a daemon thread that is abandoned
    after ``timeout``: the caller never waits longer.
    """
    url = urlparse(base_url)
    host = url.hostname
    if not host:
        return f"no host in {base_url!r}"
    port = url.port or (443 if url.scheme == "https" else 80)
    result: list[str | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{host}:{port}: {e.strerror or e}")

    thread = threading.Thread(target=attempt, name="wandb-reachability", daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"{host}:{port}: no answer within {timeout:g} s"
    return result[0]
