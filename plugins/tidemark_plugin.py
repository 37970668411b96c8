"""Registers tidemark's page with Airflow: the view's FastAPI app at /tidemark, and a link in the UI's nav."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from tidemark_airflow.app import create_app


class TidemarkPlugin(AirflowPlugin):
    name = "tidemark"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/tidemark", "name": "tidemark"}]
    external_views = [
        {"name": "tidemark", "href": "tidemark/", "url_route": "tidemark", "destination": "nav", "category": "browse"}
    ]
