"""py4j's names resolved once (``jvm.remember_names``), against the tests' real JVM."""

from __future__ import annotations

import py4j.java_gateway as py4j
import pytest
from py4j import protocol


@pytest.fixture
def reflections(spark_session, monkeypatch):
    """The reflection commands (name and member lookups) this process sends the JVM, as they are sent."""
    client = spark_session.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counted(command: str, *args, **kwargs):
        if command.startswith(protocol.REFLECTION_COMMAND_NAME):
            sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    return sent


def test_a_column_built_again_asks_the_jvm_for_no_name(spark_session, reflections) -> None:
    from pyspark.sql import functions as F

    F.col("first")
    reflections.clear()
    column = F.col("again")
    assert reflections == [], reflections  # before: five to a dozen lookups, most of them searching every jar
    assert str(column) == "Column<'again'>"


def test_classes_packages_and_static_methods_resolve_as_py4j_resolves_them(spark_session, reflections) -> None:
    jvm = spark_session.sparkContext._jvm
    for _ in range(2):
        functions = jvm.org.apache.spark.sql.functions
        assert isinstance(functions, py4j.JavaClass) and functions._fqn == "org.apache.spark.sql.functions"
        assert isinstance(jvm.no.such.Thing, py4j.JavaPackage)  # py4j's answer for a name that is no class
        assert jvm.java.lang.Math.max(2, 3) == 3
    integer = jvm.java.lang.Integer
    reflections.clear()
    assert integer.MAX_VALUE == 2**31 - 1
    assert integer.MAX_VALUE == 2**31 - 1
    assert len(reflections) == 2, reflections  # a static field's value is read each time, never remembered


def test_an_import_added_to_a_view_resolves_its_names_again(spark_session) -> None:
    view = spark_session.sparkContext._gateway.new_jvm_view()
    assert isinstance(view.ArrayDeque, py4j.JavaPackage)  # not imported into this view: no class of that name
    py4j.java_import(view, "java.util.ArrayDeque")
    assert isinstance(view.ArrayDeque, py4j.JavaClass), "a name remembered before the import"
    assert view.ArrayDeque().isEmpty()
