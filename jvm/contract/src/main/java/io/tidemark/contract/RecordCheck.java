package io.tidemark.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.networknt.schema.Error;
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

/** One pass over a record: UTF-8, one JSON document (no duplicate keys), the schema, the roles. */
public final class RecordCheck implements UDF2<byte[], byte[], Row>, Serializable {
  public static final StructType RESULT = new StructType()
      .add("reason", DataTypes.StringType)
      .add("event_id", DataTypes.StringType)
      .add("entity_id", DataTypes.StringType)
      .add("event_type", DataTypes.StringType)
      .add("event_time", DataTypes.StringType)
      .add("properties", DataTypes.StringType);

  private final String schemaJson;
  private final String eventId, entityId, eventType, eventTime, properties;
  private final boolean keyIsEntityId;
  private final int maxValueBytes;
  private transient ObjectMapper mapper;
  private transient Schema schema;
  private transient JsonPointer pEventId, pEntityId, pEventType, pEventTime, pProperties;

  public RecordCheck(String schemaJson, String eventId, String entityId, String eventType, String eventTime,
                     String properties, boolean keyIsEntityId, int maxValueBytes) {
    this.schemaJson = schemaJson; this.eventId = eventId; this.entityId = entityId; this.eventType = eventType;
    this.eventTime = eventTime; this.properties = properties; this.keyIsEntityId = keyIsEntityId;
    this.maxValueBytes = maxValueBytes;
  }

  private void init() {
    if (mapper != null) return;
    JsonFactory factory = JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
    mapper = new ObjectMapper(factory);
    schema = SchemaRegistry.withDefaultDialect(SpecificationVersion.DRAFT_2020_12).getSchema(schemaJson);
    pEventId = JsonPointer.compile(eventId); pEntityId = JsonPointer.compile(entityId);
    pEventType = eventType == null ? null : JsonPointer.compile(eventType);
    pEventTime = JsonPointer.compile(eventTime);
    pProperties = properties == null ? null : JsonPointer.compile(properties);
  }

  private static Row reject(String reason) { return RowFactory.create(reason, null, null, null, null, null); }

  /** Well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF), as Spark's is_valid_utf8. */
  static boolean validUtf8(byte[] b) {
    int i = 0, n = b.length;
    while (i < n) {
      int c = b[i] & 0xFF;
      if (c < 0x80) { i++; continue; }
      int need; int min;
      if (c >= 0xC2 && c <= 0xDF) { need = 1; min = 0x80; }
      else if (c >= 0xE0 && c <= 0xEF) { need = 2; min = 0x800; }
      else if (c >= 0xF0 && c <= 0xF4) { need = 3; min = 0x10000; }
      else return false;
      if (i + need >= n) return false;
      int cp = c & (0x3F >> need);
      for (int k = 1; k <= need; k++) {
        int d = b[i + k] & 0xFF;
        if ((d & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (d & 0x3F);
      }
      if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      i += need + 1;
    }
    return true;
  }

  @Override
  public Row call(byte[] key, byte[] value) {
    init();
    if (key == null) return reject("null_key");
    if (value != null && value.length > maxValueBytes)
      return reject("oversized: value is larger than " + maxValueBytes + " bytes");
    if (value == null) return reject("null_value");
    if (!validUtf8(value)) return reject("not_utf8");
    JsonNode doc;
    try (JsonParser parser = mapper.getFactory().createParser(value)) {
      doc = mapper.readTree(parser);
      if (doc == null) return reject("invalid_json");
      if (parser.nextToken() != null) return reject("invalid_json: text after the JSON object");
    } catch (JsonProcessingException e) {
      String m = e.getOriginalMessage();
      if (m != null && m.startsWith("Duplicate field")) return reject("invalid_json: duplicate key");
      return reject("invalid_json");
    } catch (IOException e) {
      return reject("invalid_json");
    }
    if (!doc.isObject()) return reject("not_an_object");
    List<Error> errors = schema.validate(doc);
    if (!errors.isEmpty()) {
      Error first = errors.get(0);
      return reject("schema: " + first.getKeyword() + " at " + first.getInstanceLocation() + ": " + first.getMessage());
    }
    String id = doc.at(pEventId).textValue();
    String entity = doc.at(pEntityId).textValue();
    String type = pEventType == null ? null : doc.at(pEventType).textValue();
    String time = doc.at(pEventTime).textValue();
    if (entity.indexOf('\0') >= 0) return reject("bad_entity_id: entity_id contains a NUL character");
    if (entity.getBytes(StandardCharsets.UTF_8).length > 1024)
      return reject("bad_entity_id: entity_id is longer than 1024 bytes");
    if (keyIsEntityId && !entity.equals(new String(key, StandardCharsets.UTF_8)))
      return reject("key_mismatch: key is not the entity_id");
    String props = null;
    if (pProperties != null) {
      JsonNode p = doc.at(pProperties);
      props = p.isMissingNode() || p.isNull() ? null : p.toString();
    }
    return RowFactory.create(null, id, entity, type, time, props);
  }
}
