"""Prototype: today's Variant contract check vs a one-pass Jackson + JSON Schema check in a Java UDF."""
import json, os, statistics, sys, time
from pathlib import Path
from pyspark.sql import SparkSession, functions as F
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from spark_jobs.validation import parse_records
from tidemark.producer import ProduceSpec, generate

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
HERE = Path(__file__).resolve().parent.parent / "jvm" / "contract" / "target"
jars = ",".join(str(p) for p in [HERE / "tidemark-contract-0.1.0.jar", *(HERE / "deps").glob("*.jar")])
spark = (SparkSession.builder.master("local[2]").config("spark.jars", jars).config("spark.driver.memory", "2g")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
data = Path(f"/tmp/contract-records-{N}.parquet")
if not data.exists():
    spec = ProduceSpec(count=N, entities=1000, duplicate_rate=0.03, late_rate=0.05, malformed_rate=0.02, seed=7)
    rows = [("t", i % 3, i, r.key, r.value) for i, r in enumerate(generate(spec))]
    spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, value binary") \
        .withColumn("timestamp", F.current_timestamp()).repartition(8).write.parquet(str(data))
raw = spark.read.parquet(str(data))
schema = yaml_schema = json.dumps(__import__("yaml").safe_load(open("/work/main/pipelines.yaml"))["pipelines"][0]["contract"]["schema"])
jvm = spark.sparkContext._jvm
no_columns = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 0)
check = jvm.io.tidemark.contract.RecordCheck(schema, "/event_id", "/entity_id", "/event_type", "/event_time", "/properties", no_columns, True, 65536)
spark._jsparkSession.udf().register("contract_check", check, jvm.io.tidemark.contract.RecordCheck.RESULT)

from spark_jobs.validation import _ISO_WITH_OFFSET
from spark_jobs.contract import EARLIEST_EVENT_TIME_US, LATEST_EVENT_TIME_US
def jackson(df):
    c = df.select("*", F.expr("contract_check(key, value)").alias("c")).withColumn("ts", F.expr("try_to_timestamp(c.event_time)"))
    reason = F.expr(f"""CASE WHEN c.reason IS NOT NULL THEN c.reason
      WHEN NOT regexp_like(c.event_time, '{_ISO_WITH_OFFSET}') OR ts IS NULL THEN 'bad_event_time: not ISO-8601 with an offset'
      WHEN unix_micros(ts) NOT BETWEEN {EARLIEST_EVENT_TIME_US} AND {LATEST_EVENT_TIME_US} THEN 'bad_event_time: outside' END""")
    return c.select("topic", "partition", "offset", reason.alias("quarantine_reason"),
                    F.col("c.event_id").alias("event_id"), F.col("c.entity_id").alias("entity_id"),
                    F.col("c.event_type").alias("event_type"),
                    F.col("ts").alias("event_time"), F.col("c.properties").alias("properties"))

pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def run(name, df):
    before, t = cpu(), time.time()
    df.write.format("noop").mode("overwrite").save()
    return cpu() - before, time.time() - t

# Same classification: quarantined or not per offset, and the same fields for accepted ones.
a = parse_records(raw).select("offset", (F.col("quarantine_reason").isNull()).alias("ok_a"), "event_id", "entity_id", "event_type", "event_time").alias("a")
b = jackson(raw).select("offset", (F.col("quarantine_reason").isNull()).alias("ok_b"), "event_id", "entity_id", "event_type", "event_time").alias("b")
diff = a.join(b, "offset").where("ok_a <> ok_b OR (ok_a AND (a.event_id <> b.event_id OR a.entity_id <> b.entity_id OR a.event_type <> b.event_type OR a.event_time <> b.event_time))")
print("records", raw.count(), "classified differently:", diff.count())
diff.show(5, truncate=80)
print("reasons (jackson):", jackson(raw).groupBy("quarantine_reason").count().orderBy("quarantine_reason").collect())
print("reasons (variant):", parse_records(raw).groupBy("quarantine_reason").count().orderBy("quarantine_reason").collect())
results = {"variant": [], "jackson": []}
run("warm", parse_records(raw)); run("warm", jackson(raw))
for _ in range(3):
    results["variant"].append(run("variant", parse_records(raw)))
    results["jackson"].append(run("jackson", jackson(raw)))
for name, rs in results.items():
    cpus = [c for c, _ in rs]
    print(f"{name}: CPU-s median {statistics.median(cpus):.2f} per {N:,} = {statistics.median(cpus) / N * 1e6:.1f} CPU-s per million; runs {[round(c, 2) for c in cpus]}; wall {[round(w, 1) for _, w in rs]}")
