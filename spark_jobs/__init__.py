"""tidemark: Kafka -> Spark -> Delta Lake + PostgreSQL, exactly once. Spark jobs and the tidemark CLI."""
