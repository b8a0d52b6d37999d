"""/docs: interactive API documentation that works offline (Swagger UI served by the app itself).

The Swagger UI files come from the ``flask-swagger-ui`` package (which bundles swagger-ui-dist);
without it /docs falls back to a plain HTML list of the operations, still without any CDN.
"""

from __future__ import annotations

import html
from pathlib import Path

from flask import Blueprint, abort, current_app, send_from_directory

blp = Blueprint("docs", __name__)
#: the docs page runs the API from a browser: no other site may frame it (clickjacking)
FRAMING_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
                   "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


@blp.after_request
def _no_framing(response):
    for key, value in FRAMING_HEADERS.items():
        response.headers.setdefault(key, value)
    return response

ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "favicon-32x32.png",
          "favicon-16x16.png", "index.css")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>dsdoctor API</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/swagger-ui-standalone-preset.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>
"""

_INIT = """window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    layout: "BaseLayout",
    validatorUrl: null
  });
};
"""


def swagger_dist() -> Path | None:
    """The folder of the bundled Swagger UI files, if flask-swagger-ui is installed."""
    try:
        import flask_swagger_ui
    except ImportError:
        return None
    dist = Path(flask_swagger_ui.__file__).resolve().parent / "dist"
    return dist if (dist / "swagger-ui-bundle.js").is_file() else None


def _fallback_page() -> str:
    from flask_smorest import Api

    api: Api = current_app.extensions["dsdoctor"]["api"]
    spec = api.spec.to_dict()
    rows = []
    for path, ops in sorted(spec.get("paths", {}).items()):
        for method, op in ops.items():
            if method in ("get", "post", "put", "patch", "delete"):
                rows.append(f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                            f"<td>{html.escape(op.get('summary', ''))}</td></tr>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dsdoctor API</title></head><body>"
            "<h1>dsdoctor API</h1><p>The machine-readable description is at <a href='/openapi.json'>/openapi.json"
            "</a>. (Install flask-swagger-ui for the interactive page.)</p><table>"
            + "".join(rows) + "</table></body></html>")


@blp.get("/docs")
def docs_page():
    """Swagger UI for /openapi.json, all assets served locally."""
    if swagger_dist() is None:
        return current_app.response_class(_fallback_page(), mimetype="text/html")
    return current_app.response_class(_PAGE, mimetype="text/html")


@blp.get("/docs/assets/<name>")
def docs_asset(name: str):
    """A Swagger UI file (from swagger-ui-dist, bundled by flask-swagger-ui)."""
    if name == "init.js":
        return current_app.response_class(_INIT, mimetype="text/javascript")
    dist = swagger_dist()
    if dist is None or name not in ASSETS:
        abort(404)
    return send_from_directory(dist, name, max_age=86400)
