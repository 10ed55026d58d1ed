"""The Dockerfile and `make image` (scripts/build-image.sh) build the same image: the same
entry point, command, user, environment and port, and both install from uv.lock. (The image
itself is proven by tests/image, `make image`.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
SCRIPT = (REPO / "scripts" / "build-image.sh").read_text()


def script_config(key: str) -> list[str]:
    return re.findall(rf"--config\.{key} (\S+)", SCRIPT)


def test_entrypoint_command_user_port_and_env_agree() -> None:
    entry = json.loads(re.search(r"^ENTRYPOINT (.*)$", DOCKERFILE, re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (.*)$", DOCKERFILE, re.M).group(1))  # type: ignore[union-attr]
    script_entry = script_config("entrypoint")
    assert [Path(script_entry[0]).name, *script_entry[1:]] == entry
    assert script_config("cmd") == cmd == ["operator"]
    assert re.search(r"^USER 65532:65532$", DOCKERFILE, re.M)
    assert script_config("user") == ["65532:65532"]
    assert re.search(r"^EXPOSE 8080$", DOCKERFILE, re.M) and script_config("exposedports") == [
        "8080/tcp"]
    for env in ("PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"):
        assert env in script_config("env")
        name, value = env.split("=")
        assert re.search(rf"\b{name}={value}\b", DOCKERFILE), env


def test_both_install_the_locked_wheels() -> None:
    assert "uv export --frozen --no-emit-project --no-dev" in DOCKERFILE
    assert "--require-hashes" in DOCKERFILE
    assert "export --quiet --frozen --no-emit-project --no-dev" in SCRIPT
    assert "--require-hashes" in SCRIPT
    assert "!uv.lock" in (REPO / ".dockerignore").read_text()  # in the build context
