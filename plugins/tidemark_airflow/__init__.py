"""tidemark's Airflow side: the hook, operators, reconciliation logic and alert notifier the DAGs use.

Airflow puts ``plugins/`` on ``sys.path``, so DAG files import ``tidemark_airflow``. Nothing here
imports Spark, psycopg2 or confluent-kafka at module level: DAG parsing stays cheap.
"""
