package io.tidemark.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.networknt.schema.Error;
import com.networknt.schema.OutputFormat;
import com.networknt.schema.Schema;
import com.networknt.schema.SchemaRegistry;
import com.networknt.schema.SpecificationVersion;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A pipeline's contract check of one Kafka record, in one pass, inside Spark's JVM.
 *
 * <p>In order: a key (when the contract keys records by entity), the value's size, well-formed
 * UTF-8, one JSON document (Jackson, duplicate keys refused, nothing but whitespace after it), an
 * object, the pipeline's JSON Schema (draft 2020-12), then the roles: non-empty strings, an entity
 * id PostgreSQL can index, the key equal to it. The event time's parse and range stay in Spark SQL
 * (spark_jobs/validation.py), so a time means the same in every pipeline.
 *
 * <p>Returns {@link #RESULT}: {@code reason} (null when the record passes) and, for a record that
 * passes, the roles, {@code properties} as JSON text and the typed columns' values as text.
 */
public final class RecordCheck implements UDF2<byte[], byte[], Row>, Serializable {
  private static final long serialVersionUID = 1L;

  public static final StructType RESULT =
      new StructType()
          .add("reason", DataTypes.StringType)
          .add("event_id", DataTypes.StringType)
          .add("entity_id", DataTypes.StringType)
          .add("event_type", DataTypes.StringType)
          .add("event_time", DataTypes.StringType)
          .add("properties", DataTypes.StringType)
          .add("columns", DataTypes.createArrayType(DataTypes.StringType));

  /** The longest entity id, in UTF-8 bytes, that PostgreSQL's btree index takes with room to spare. */
  public static final int MAX_ENTITY_ID_BYTES = 1024;

  private final String schemaJson;
  private final String eventId;
  private final String entityId;
  private final String eventType; // may be null
  private final String eventTime;
  private final String properties; // may be null: no properties column
  private final String[] columns;
  private final boolean keyIsEntityId;
  private final int maxValueBytes;

  private transient ObjectMapper mapper;
  private transient Schema schema;
  private transient JsonPointer[] roles; // event id, entity id, event type, event time, properties
  private transient JsonPointer[] columnPointers;

  public RecordCheck(
      String schemaJson,
      String eventId,
      String entityId,
      String eventType,
      String eventTime,
      String properties,
      String[] columns,
      boolean keyIsEntityId,
      int maxValueBytes) {
    this.schemaJson = schemaJson;
    this.eventId = eventId;
    this.entityId = entityId;
    this.eventType = eventType;
    this.eventTime = eventTime;
    this.properties = properties;
    this.columns = columns == null ? new String[0] : columns.clone();
    this.keyIsEntityId = keyIsEntityId;
    this.maxValueBytes = maxValueBytes;
  }

  /** Built once per task's copy of the check (the UDF is serialized to each executor). */
  private void init() {
    if (mapper != null) return;
    JsonFactory factory =
        JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
    // Numbers keep their exact value (no double rounding, no Infinity): Spark parses properties again.
    mapper =
        new ObjectMapper(factory)
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .setNodeFactory(JsonNodeFactory.withExactBigDecimals(true));
    schema = SchemaRegistry.withDefaultDialect(SpecificationVersion.DRAFT_2020_12).getSchema(schemaJson);
    roles =
        new JsonPointer[] {
          JsonPointer.compile(eventId),
          JsonPointer.compile(entityId),
          eventType == null ? null : JsonPointer.compile(eventType),
          JsonPointer.compile(eventTime),
          properties == null ? null : JsonPointer.compile(properties),
        };
    columnPointers = new JsonPointer[columns.length];
    for (int i = 0; i < columns.length; i++) columnPointers[i] = JsonPointer.compile(columns[i]);
  }

  private static Row reject(String reason) {
    return RowFactory.create(reason, null, null, null, null, null, null);
  }

  /** A pointer as a quarantine reason names it: without its leading slash ("order/id"). */
  private static String named(String pointer) {
    return pointer.startsWith("/") ? pointer.substring(1) : pointer;
  }

  @Override
  public Row call(byte[] key, byte[] value) {
    init();
    if (key == null && keyIsEntityId) return reject("null_key");
    if (value != null && value.length > maxValueBytes)
      return reject("oversized: value is larger than " + maxValueBytes + " bytes");
    if (value == null) return reject("null_value");
    if (!Utf8.isValid(value)) return reject("not_utf8");
    JsonNode doc;
    try (JsonParser parser = mapper.getFactory().createParser(value)) {
      doc = mapper.readTree(parser);
      if (doc == null) return reject("invalid_json");
      if (parser.nextToken() != null) return reject("invalid_json: text after the JSON object");
    } catch (JsonProcessingException e) {
      String message = e.getOriginalMessage();
      if (message != null && message.startsWith("Duplicate field"))
        return reject("invalid_json: a key appears twice in one object");
      return reject("invalid_json");
    } catch (IOException e) {
      return reject("invalid_json");
    }
    if (!doc.isObject()) return reject("not_an_object");
    // The boolean format stops at the first failure; the full one runs only to name it.
    if (!schema.validate(doc, OutputFormat.BOOLEAN)) return reject(reason(schema.validate(doc)));

    String id = text(doc, roles[0]);
    String entity = text(doc, roles[1]);
    String type = roles[2] == null ? null : text(doc, roles[2]);
    String time = text(doc, roles[3]);
    if (id == null || id.isEmpty()) return reject("missing_field: " + named(eventId) + " is empty");
    if (entity == null || entity.isEmpty())
      return reject("missing_field: " + named(entityId) + " is empty");
    if (type != null && type.isEmpty()) return reject("missing_field: " + named(eventType) + " is empty");
    if (time == null) return reject("missing_field: " + named(eventTime));
    if (entity.indexOf('\0') >= 0) return reject("bad_entity_id: entity_id contains a NUL character");
    if (entity.getBytes(StandardCharsets.UTF_8).length > MAX_ENTITY_ID_BYTES)
      return reject("bad_entity_id: entity_id is longer than " + MAX_ENTITY_ID_BYTES + " bytes");
    if (keyIsEntityId && !entity.equals(new String(key, StandardCharsets.UTF_8)))
      return reject("key_mismatch: key is not the entity_id");

    String props = null;
    if (roles[4] != null) {
      JsonNode node = doc.at(roles[4]);
      props = node.isMissingNode() || node.isNull() ? null : node.toString();
    } else {
      props = doc.toString();
    }
    String[] values = new String[columnPointers.length];
    for (int i = 0; i < values.length; i++) {
      JsonNode node = doc.at(columnPointers[i]);
      values[i] = node.isMissingNode() || node.isNull() ? null : node.isValueNode() ? node.asText() : node.toString();
    }
    return RowFactory.create(null, id, entity, type, time, props, values);
  }

  private static String text(JsonNode doc, JsonPointer pointer) {
    JsonNode node = doc.at(pointer);
    return node.isTextual() ? node.textValue() : null;
  }

  /** The first schema error as a quarantine reason: the rule and where (a JSON pointer). */
  static String reason(List<Error> errors) {
    Error first = errors.get(0);
    String at = first.getInstanceLocation().toString();
    switch (first.getKeyword()) {
      case "required":
        return "missing_field: " + named(at + "/" + first.getProperty());
      case "type":
        return "wrong_type: " + named(at) + " must be " + expected(first.getSchemaNode());
      default:
        return "schema: " + first.getKeyword() + " at " + (at.isEmpty() ? "/" : at) + ": " + first.getMessage();
    }
  }

  /** "a string", "an object or null" from a schema's {@code type}. */
  private static String expected(JsonNode type) {
    JsonNode types = type != null && type.has("type") ? type.get("type") : type;
    if (types == null) return "of another type";
    if (types.isTextual()) return article(types.textValue());
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < types.size(); i++) {
      if (i > 0) out.append(i == types.size() - 1 ? " or " : ", ");
      out.append(i == 0 ? article(types.get(i).asText()) : types.get(i).asText());
    }
    return out.toString();
  }

  private static String article(String type) {
    return ("object".equals(type) || "array".equals(type) || "integer".equals(type) ? "an " : "a ") + type;
  }
}
