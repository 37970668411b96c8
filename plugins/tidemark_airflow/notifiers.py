"""The alert a failed tidemark task sends: always to the log, to a webhook and by email when configured."""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING

from airflow.sdk import BaseNotifier
from airflow.sdk.exceptions import AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context

WEBHOOK_CONN_ID = "tidemark_alert_webhook"
SMTP_CONN_ID = "smtp_default"


def webhook_url(host: str | None, schema: str | None, port: int | None, extra: dict) -> str:
    """The URL of a webhook connection: a full URL in host (Slack's style), or scheme + host + port + endpoint."""
    if extra.get("url"):
        return str(extra["url"])
    if not host:
        raise ValueError(f"connection {WEBHOOK_CONN_ID!r} needs the webhook URL in its host (or extra 'url')")
    base = host if "://" in host else f"{schema or 'https'}://{host}" + (f":{port}" if port else "")
    endpoint = str(extra.get("endpoint", "")).lstrip("/")
    return f"{base.rstrip('/')}/{endpoint}" if endpoint else base


class BadRequest(AirflowFailException):
    """A trigger form or parameter the user must fix: the task fails at once and pages no one."""


class StillOpen(AirflowFailException):
    """A reconcile run that found nothing new while earlier findings are open: the run fails (the
    findings are not fixed) but pages no one again; the run that found them, the daily scheduled
    run and a run triggered by hand alert."""


class AlertNotifier(BaseNotifier):
    """Send a tidemark alert about the task in ``context``.

    * always: an ERROR line in the task log;
    * a Slack-compatible JSON POST (``{"text": ...}``) when the ``tidemark_alert_webhook``
      connection exists;
    * an email through Airflow's SMTP connection (``smtp_default``) to ``email``, or when that is not
      given to the recipients ``TIDEMARK_ALERT_EMAIL`` names (comma-separated), when that connection exists.

    A channel that fails is logged and does not hide the others. A :class:`BadRequest` (a form to
    fix) is logged and not sent: alerts are for findings and failures, not for typos. Neither is a
    :class:`StillOpen` (findings already alerted on, and not fixed yet).

    :param webhook_conn_id: connection of the webhook
    :param smtp_conn_id: SMTP connection for email
    :param email: the recipients (a pipeline's ``alerts.email``); None: ``TIDEMARK_ALERT_EMAIL``'s
    """

    template_fields = ()

    def __init__(
        self,
        *,
        webhook_conn_id: str = WEBHOOK_CONN_ID,
        smtp_conn_id: str = SMTP_CONN_ID,
        email: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__()
        self.webhook_conn_id = webhook_conn_id
        self.smtp_conn_id = smtp_conn_id
        self.email = email

    @staticmethod
    def message(context: Context) -> str:
        """The alert text; secrets the tidemark connections hold, or that look like secrets, are masked."""
        from spark_jobs.secrets import redact
        from tidemark_airflow.connections import connection_secrets

        ti = context.get("ti") or context.get("task_instance")
        dag_id = getattr(ti, "dag_id", "?")
        task_id = getattr(ti, "task_id", "?")
        run_id = context.get("run_id") or getattr(ti, "run_id", "?")
        exception = context.get("exception")
        detail = str(exception) if exception else "no error message (see the task log)"
        return redact(f"tidemark alert: {dag_id}.{task_id} failed in run {run_id}\n{detail}", connection_secrets())

    def notify(self, context: Context) -> None:
        if isinstance(context.get("exception"), BadRequest):
            self.log.warning("not alerting: the request was bad (%s)", context["exception"])
            return
        if isinstance(context.get("exception"), StillOpen):
            self.log.warning("not alerting again: nothing new, the open findings were alerted on when found")
            return
        self.send(self.message(context))

    def send(self, text: str) -> None:
        """Send ``text`` (first line: the subject) on every configured channel; secrets masked."""
        from spark_jobs.secrets import redact
        from tidemark_airflow.connections import connection_secrets

        text = redact(text, connection_secrets())
        self.log.error("%s", text)
        self._post_webhook(text)
        self._send_email(text)

    def _connection(self, conn_id: str):  # -> Connection | None
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return None

    def _post_webhook(self, text: str) -> None:
        import requests

        conn = self._connection(self.webhook_conn_id)
        if conn is None:
            return
        try:
            url = webhook_url(conn.host, conn.schema, conn.port, conn.extra_dejson)
            response = requests.post(url, json={"text": text}, timeout=10)
            response.raise_for_status()
            self.log.info("alert posted to the %s webhook", self.webhook_conn_id)
        except Exception:  # one broken channel must not hide the alert on the others
            self.log.exception("could not post the alert to the %s webhook", self.webhook_conn_id)

    def _send_email(self, text: str) -> None:
        configured = os.environ.get("TIDEMARK_ALERT_EMAIL", "").split(",") if self.email is None else self.email
        recipients = [r.strip() for r in configured if r.strip()]
        if not recipients or self._connection(self.smtp_conn_id) is None:
            return
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook

            subject, _, body = text.partition("\n")
            with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
                smtp.send_email_smtp(to=recipients, subject=subject, html_content=f"<pre>{html.escape(body)}</pre>")
            self.log.info("alert emailed to %s", ", ".join(recipients))
        except Exception:  # see above
            self.log.exception("could not email the alert")
