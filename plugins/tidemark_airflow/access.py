"""Who may see what on the tidemark page: the permission to read the page at all (the custom view
:data:`RESOURCE`, since its reports name entity ids), and within it the pipelines whose DAGs Airflow lets
the user read. Airflow's auth manager decides both, whichever the deployment runs: the simple auth manager
lets every role read custom views and every DAG; FAB's grants both per role, per DAG.

FAB grants only permissions its database holds, and nothing else creates a plugin's own: the first time
the api-server asks, "can read on Tidemark" is created and given to ``Admin`` (as FAB gives ``Admin``
every permission), so a deployment can then grant it to other roles (Security → List Roles, or ``airflow
roles add-perms ROLE -r Tidemark -a can_read``).
"""

from __future__ import annotations

import logging
import threading

from spark_jobs.pipeline_names import PipelineNames

RESOURCE = "Tidemark"  # the custom view a deployment grants (FAB: "can read on Tidemark")
READ = "can_read"
FAB_AUTH_MANAGER = "FabAuthManager"

log = logging.getLogger(__name__)
_registered = threading.Event()


def may_read(auth_manager, user) -> bool:  # an Airflow auth manager and one of its users
    """Whether ``user`` may read the tidemark pages."""
    return auth_manager.is_authorized_custom_view(method="GET", resource_name=RESOURCE, user=user)


def register_view(auth_manager) -> None:
    """With FAB's auth manager, once a process: create "can read on Tidemark" if it does not exist and give it to
    ``Admin``. The page runs this before it reads its user, and the auth manager's cache of users is cleared,
    so a user signed in before sees the new permission at once."""
    if _registered.is_set() or type(auth_manager).__name__ != FAB_AUTH_MANAGER:
        return
    from airflow.providers.fab.www.security_appless import ApplessAirflowSecurityManager
    from airflow.utils.session import create_session

    with create_session() as session:
        security = ApplessAirflowSecurityManager(session=session)
        permission = security.create_permission(READ, RESOURCE)
        admin = security.find_role("Admin")
        if admin is not None and permission is not None:
            security.add_permission_to_role(admin, permission)
    auth_manager.cache.clear()
    _registered.set()
    log.info("tidemark: FAB's %r on %r exists and Admin holds it", READ, RESOURCE)


def everything(name: str) -> bool:
    """Access to every pipeline (a scraper's token)."""
    return True


def pipeline_access(auth_manager, user):  # -> Callable[[str], bool]
    """Which pipelines ``user`` may see (their state, findings and quarantine samples): those whose DAGs Airflow
    lets them read (their ingest DAG), by whatever auth manager the deployment runs. Triggering a repair goes
    through Airflow's own API as the user, so it needs the permission to trigger the pipeline's repair DAG."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    def allowed(name: str) -> bool:
        details = DagDetails(id=PipelineNames(name).dag_id("ingest"))
        return auth_manager.is_authorized_dag(method="GET", details=details, user=user)

    return allowed
