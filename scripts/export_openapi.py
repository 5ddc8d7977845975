"""Write openapi/openapi.json from the app (`--check`: fail if the file is stale)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402

TARGET = ROOT / "openapi" / "openapi.json"


def render() -> str:
    # Defaults only: the document must not depend on this machine's environment.
    app = create_app(Settings.model_construct())
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run `make openapi`", file=sys.stderr)
            return 1
        print("openapi/openapi.json is up to date")
        return 0
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
