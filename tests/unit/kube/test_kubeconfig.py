"""The transport's own kubeconfig loader (trainjobs.kube.kubeconfig): what each kind of user
sends to a real local HTTP server, through `connect` and `Kube`."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from trainjobs.kube import Kube, KubeconfigError, connect
from trainjobs.kube.kubeconfig import current_context, load


def _write(path: Path, server: str, user: dict[str, Any], **context: Any) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", **context}}]}))
    return path


async def _server(seen: list[dict[str, str]]) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        seen.append({"auth": request.headers.get("Authorization", ""),
                     "ua": request.headers.get("User-Agent", ""),
                     "query": request.query_string, "path": request.path,
                     "impersonate": json.dumps([(k, v) for k, v in request.headers.items()
                                                if k.startswith("Impersonate-")])})
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _auth_of(tmp_path: Path, user: dict[str, Any], calls: int = 1) -> list[str]:
    seen: list[dict[str, str]] = []
    runner, server = await _server(seen)
    try:
        kube = Kube(await connect(str(_write(tmp_path / "kc", server, user))),
                    user_agent="test-agent")
        try:
            for _ in range(calls):
                got = await kube.request("GET", "/api/v1/namespaces/n/pods/p",
                                         query=[("limit", 5), ("labelSelector", "a/b")])
                assert got["metadata"]["name"] == "p"
        finally:
            await kube.api.close()
    finally:
        await runner.cleanup()
    assert {s["ua"] for s in seen} == {"test-agent"}
    assert seen[0]["path"] == "/api/v1/namespaces/n/pods/p"
    assert seen[0]["query"] == "limit=5&labelSelector=a/b"
    return [s["auth"] for s in seen]


async def test_impersonation_is_sent_as_client_gos_headers(tmp_path: Path) -> None:
    """kubeconfig's `as` fields (kubectl --as, --as-group, --as-uid): the Impersonate-*
    headers client-go's impersonating round tripper sends, groups and extras repeated, an
    extra's key %-encoded where it is no HTTP token character."""
    seen: list[dict[str, str]] = []
    runner, server = await _server(seen)
    user = {"token": "abc", "as": "jane", "as-uid": "42", "as-groups": ["dev", "ops"],
            "as-user-extra": {"scopes": ["view", "edit"], "acme.com/project id": ["x"]}}
    try:
        kube = Kube(await connect(str(_write(tmp_path / "kc", server, user))))
        try:
            await kube.request("GET", "/api/v1/namespaces/n/pods/p")
        finally:
            await kube.api.close()
    finally:
        await runner.cleanup()
    assert seen[0]["auth"] == "Bearer abc"
    assert [tuple(h) for h in json.loads(seen[0]["impersonate"])] == [
        ("Impersonate-User", "jane"), ("Impersonate-Uid", "42"),
        ("Impersonate-Group", "dev"), ("Impersonate-Group", "ops"),
        ("Impersonate-Extra-acme.com%2Fproject%20id", "x"),  # (the file's keys are sorted)
        ("Impersonate-Extra-scopes", "view"), ("Impersonate-Extra-scopes", "edit")]
    # Without them nothing is added.
    assert load(str(_write(tmp_path / "plain", server, {"token": "t"}))).impersonate == ()


async def test_a_token_is_sent_as_bearer(tmp_path: Path) -> None:
    assert await _auth_of(tmp_path, {"token": "abc"}) == ["Bearer abc"]


async def test_basic_auth(tmp_path: Path) -> None:
    expected = "Basic " + base64.b64encode(b"me:pw").decode()
    assert await _auth_of(tmp_path, {"username": "me", "password": "pw"}) == [expected]


async def test_a_token_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    assert await _auth_of(tmp_path, {"tokenFile": "tok"}) == ["Bearer from-file"]


def _plugin(tmp_path: Path, expires: str) -> dict[str, Any]:
    """An exec plugin that counts its runs and says what KUBERNETES_EXEC_INFO it got."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, pathlib, sys\n"
        "n = pathlib.Path(sys.argv[1]); runs = int(n.read_text()) + 1 if n.exists() else 1\n"
        "n.write_text(str(runs))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['kind'] == 'ExecCredential' and os.environ['PLUGIN_ENV'] == 'x'\n"
        f"print(json.dumps({{'kind': 'ExecCredential', 'status': {{'token': f'run{{runs}}',"
        f" 'expirationTimestamp': '{expires}'}}}}))\n")
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(script), str(tmp_path / "runs")],
                     "env": [{"name": "PLUGIN_ENV", "value": "x"}]}}


async def test_an_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path) -> None:
    user = _plugin(tmp_path, "2999-01-01T00:00:00Z")
    assert await _auth_of(tmp_path, user, calls=3) == ["Bearer run1"] * 3


async def test_an_expired_exec_token_is_asked_for_again(tmp_path: Path) -> None:
    user = _plugin(tmp_path, "2000-01-01T00:00:00Z")
    assert await _auth_of(tmp_path, user, calls=2) == ["Bearer run2", "Bearer run3"]


async def test_a_failing_exec_plugin_is_a_kubeconfig_error(tmp_path: Path) -> None:
    user = {"exec": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}
    with pytest.raises(KubeconfigError, match="exited 3"):
        await connect(str(_write(tmp_path / "kc", "https://127.0.0.1:1", user)))


def test_auth_provider_is_refused_with_the_way_out(tmp_path: Path) -> None:
    path = _write(tmp_path / "kc", "https://x", {"auth-provider": {"name": "oidc"}})
    with pytest.raises(KubeconfigError, match="exec plugin"):
        load(str(path))


def test_kubeconfig_files_merge_the_first_naming_an_entry_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _write(tmp_path / "a", "https://first", {"token": "a"}, namespace="ns-a")
    second = tmp_path / "b"
    second.write_text(yaml.safe_dump({
        "current-context": "other",
        "clusters": [{"name": "k", "cluster": {"server": "https://second"}},
                     {"name": "k2", "cluster": {"server": "https://k2"}}],
        "users": [], "contexts": [{"name": "d", "context": {"cluster": "k2"}}]}))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    creds = load(None)
    assert (creds.server, creds.token, creds.namespace) == ("https://first", "a", "ns-a")
    assert load(None, context="d").server == "https://k2"
    assert current_context(None)["namespace"] == "ns-a"


def test_a_missing_kubeconfig_is_a_kubeconfig_error(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match=r"not found|No such file"):
        load(str(tmp_path / "nope"))
    bad = tmp_path / "bad"
    bad.write_text(json.dumps(["a list"]))
    with pytest.raises(KubeconfigError, match="not a mapping"):
        load(str(bad))
