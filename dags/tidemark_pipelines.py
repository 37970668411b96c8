"""
### tidemark_pipelines (not a DAG)

The problems of ``pipelines.yaml``, where Airflow shows them. The other files of this folder make
every kind of DAG for each pipeline the file declares without a problem
(``tidemark_airflow/pipelines.py``). A pipeline whose entry has a problem gets no DAGs; this file
then fails to import with one line per problem, naming the file, the pipeline and the field, so the
problem is listed under Airflow's DAG import errors while the other pipelines' DAGs load and run.
``tidemark pipelines check`` gives the same lines before a deployment.
"""

from __future__ import annotations

from tidemark_airflow.pipelines import raise_problems

raise_problems()
