"""Who may see what on the tidemark page: the page's permission, and the pipelines whose DAGs a user may read."""

from __future__ import annotations

from datetime import UTC, datetime

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)


def test_reading_the_pages_takes_the_permission_on_the_tidemark_view() -> None:
    """Airflow's own simple auth manager decides: every role may read, a user without one may not."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from tidemark_airflow.access import may_read

    manager = SimpleAuthManager()
    assert may_read(manager, SimpleAuthManagerUser(username="viewer", role="viewer"))
    assert not may_read(manager, SimpleAuthManagerUser(username="nobody", role=None))


def test_a_user_sees_only_the_pipelines_whose_dags_airflow_lets_them_read() -> None:
    """Permissions follow the pipeline: the list, and the file's problems that name a pipeline, are cut to what
    the user may read (whatever auth manager says so: the page asks it through is_authorized_dag)."""
    from tidemark_airflow.access import pipeline_access
    from tidemark_airflow.listing import Listing, readable
    from tidemark_airflow.pipelines import Unrunnable

    lines = ["pipelines.yaml: pipeline 'payments': contract.schema: not a JSON Schema", "pipelines.yaml: not valid"]
    listing = Listing(
        [Unrunnable("events", "events", ()), Unrunnable("payments", "payments", (lines[0],))], lines, "p.yaml"
    )

    class AuthManager:  # the one method the page asks, as an auth manager with per-DAG access answers it
        def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
            return method == "GET" and details.id in user

    team = pipeline_access(AuthManager(), {"tidemark_ingest", "tidemark_reconcile"})
    seen = readable(listing, team)
    assert [p.name for p in seen.pipelines] == ["events"] and seen.problems == ["pipelines.yaml: not valid"]
    finance = pipeline_access(AuthManager(), {"tidemark_ingest__payments"})
    assert [p.name for p in readable(listing, finance).pipelines] == ["payments"]
    assert readable(listing, lambda name: True) is listing
