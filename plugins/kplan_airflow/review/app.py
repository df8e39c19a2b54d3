"""The "Kafka plans" review app: the plan list and a page per plan, plus their JSON and the plan's files.

Mounted on the Airflow API server at /kafka-plans (plugins/kafka_plans.py) and shown in the UI as an
external view (Browse -> Kafka plans). Airflow does not protect a plugin's app: every route here depends on
`requires_access_view(AccessView.WEBSITE)`, which reads the caller's token (the `Authorization` header, or the
UI's `_token` cookie that reaches the iframe) and asks Airflow's auth manager; no token -> 401, a token the
auth manager refuses -> 403. Charts are drawn by plotly.js served from the pinned `plotly` package (no CDN).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from kplan_airflow import runs

HERE = Path(__file__).parent


def _requires_website():
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return requires_access_view(AccessView.WEBSITE)


@cache
def _templates():
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    return Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))


def _base_url() -> str:
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def _render(name: str, request: Request, **ctx: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    html = _templates().get_template(name).render(root=root, airflow=_base_url(), **ctx)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def _data():
    from kplan_airflow.review import data

    return data


def _call(fn, *args: Any, **kwargs: Any) -> Any:
    data = _data()
    try:
        return fn(*args, **kwargs)
    except data.NotFound as e:
        raise HTTPException(status_code=404, detail=str(e)) from None


def create_app() -> FastAPI:
    app = FastAPI(title="Kafka plans", dependencies=[Depends(_requires_website())], docs_url=None,
                  redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse, name="plans")
    def plans_page(request: Request) -> HTMLResponse:
        rows = _call(_data().list_plans, runs.runs_root())
        return _render("plans.html", request, plans=rows)

    @app.get("/api/plans", name="plans_json")
    def plans_json() -> JSONResponse:
        return JSONResponse({"runs_root": str(runs.runs_root()), "plans": _call(_data().list_plans, runs.runs_root())})

    @app.get("/runs/{dag_key}/{run_key}", response_class=HTMLResponse, name="plan")
    def plan_page(request: Request, dag_key: str, run_key: str) -> HTMLResponse:
        page = _call(_data().plan_page, runs.runs_root(), dag_key, run_key)
        return _render("plan.html", request, page=page)

    @app.get("/api/runs/{dag_key}/{run_key}", name="plan_json")
    def plan_json(dag_key: str, run_key: str) -> JSONResponse:
        return JSONResponse(_call(_data().plan_page, runs.runs_root(), dag_key, run_key))

    @app.get("/api/runs/{dag_key}/{run_key}/moves", name="moves_json")
    def moves_json(dag_key: str, run_key: str, q: str = "", limit: int = Query(500, ge=1, le=5000),
                   offset: int = Query(0, ge=0)) -> JSONResponse:
        return JSONResponse(_call(_data().moves, runs.runs_root(), dag_key, run_key, q, limit, offset))

    @app.get("/api/runs/{dag_key}/{run_key}/progress", name="progress_json")
    def progress_json(dag_key: str, run_key: str) -> JSONResponse:
        return JSONResponse(_call(_data().progress, runs.runs_root(), dag_key, run_key))

    @app.get("/runs/{dag_key}/{run_key}/files/{name}", name="download")
    def download(dag_key: str, run_key: str, name: str) -> Response:
        content, fname = _call(_data().download, runs.runs_root(), dag_key, run_key, name)
        return Response(content, media_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{fname}"'})

    @app.get("/static/plotly.min.js", name="plotly")
    def plotly_js() -> FileResponse:
        return FileResponse(plotly_path(), media_type="application/javascript",
                            headers={"Cache-Control": "private, max-age=86400"})

    @app.get("/static/{name}", name="static")
    def static(name: str) -> FileResponse:
        path = HERE / "static" / name
        if "/" in name or not path.is_file():
            raise HTTPException(status_code=404, detail="no such file")
        return FileResponse(path)

    return app


def plotly_path() -> Path:
    """plotly.min.js inside the installed plotly package (pinned in pyproject.toml)."""
    import importlib.util

    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise HTTPException(status_code=500, detail="the plotly package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


app = create_app()


def old_route_app(new_route: str) -> FastAPI:
    """The UI's former route of this view (`/plugin/kafka-plans/...`, where the app's own path followed it a
    second time): a bookmark or a link there is redirected to the same page under `new_route`."""
    old = FastAPI(title="Kafka plans (old route)", docs_url=None, redoc_url=None, openapi_url=None)

    @old.get("/{rest:path}", include_in_schema=False)
    def moved(rest: str, request: Request) -> Response:
        from fastapi.responses import RedirectResponse

        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{new_route}/{rest}{query}", status_code=308)

    return old
