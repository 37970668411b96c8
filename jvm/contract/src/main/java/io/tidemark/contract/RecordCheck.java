package io.tidemark.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.networknt.schema.Error;
import com.networknt.schema.OutputFormat;
import com.networknt.schema.Schema;
import com.networknt.schema.SchemaRegistry;
import com.networknt.schema.SpecificationVersion;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A pipeline's contract check of one Kafka record (key, value), in one pass, inside Spark's JVM.
 *
 * <p>The checks, in the order that names a record's first problem: the key (when the contract
 * keys records by entity), the value's size, well-formed UTF-8, one JSON document (duplicate keys
 * refused, nothing but whitespace after it), an object; then each role (event id, entity id, event
 * type, event time) present as a string, the ids and type not empty, an entity id PostgreSQL can
 * hold. Those make {@code reason}. The event time's parse and range are Spark SQL's (see
 * spark_jobs/validation.py), so a time means the same in every pipeline; they rank after the
 * above and before {@code late_reason}: the properties an object (or null), the pipeline's JSON
 * Schema (draft 2020-12), the key equal to the entity id. For today's contract this is the order
 * (and the text) of the SQL check this class replaced.
 *
 * <p>The value is parsed from its decoded text with Jackson's defaults, exactly as Spark's {@code
 * parse_json} does (which the pipeline's {@code properties} then go through): a document one of
 * them accepts, the other accepts too. {@code properties} is the value at the properties pointer
 * in the Variant's canonical form, exactly as Spark's {@code to_json(try_parse_json(text))} writes
 * it ({@link VariantJson}); should Spark's Variant builder refuse the text the check accepted, the
 * record is {@code invalid_json}, as Spark's check said. {@code columns} are the JSON texts at the
 * typed columns' pointers (null where the value has none), taken from the text the same way, so
 * Spark reads a number exactly as the producer wrote it.
 */
public final class RecordCheck implements UDF2<byte[], byte[], Row>, Serializable {
  private static final long serialVersionUID = 1L;

  /** What {@link #call} returns. */
  public static final StructType RESULT =
      new StructType()
          .add("reason", DataTypes.StringType)
          .add("late_reason", DataTypes.StringType)
          .add("event_id", DataTypes.StringType)
          .add("entity_id", DataTypes.StringType)
          .add("event_type", DataTypes.StringType)
          .add("event_time", DataTypes.StringType)
          .add("properties", DataTypes.StringType)
          .add("columns", DataTypes.createArrayType(DataTypes.StringType));

  private static final String TEXT_AFTER = "invalid_json: text after the JSON object";

  /** The compiled contracts of this JVM, by their configuration: tasks share one. */
  private static final Map<String, Compiled> COMPILED = new ConcurrentHashMap<>();

  private final String schemaJson;
  private final String[] roles; // event id, entity id, event type (or null), event time
  private final String properties; // may be null: the pipeline keeps no properties
  private final String[] columns; // the typed columns' pointers
  private final boolean keyIsEntityId;
  private final int maxValueBytes;
  private final int maxEntityIdBytes;
  // The session's Variant settings when the check was made, as Spark's parse_json reads them.
  private final boolean allowDuplicateKeys;
  private final boolean validateUnicode;
  private transient Compiled compiled;

  public RecordCheck(
      String schemaJson,
      String eventId,
      String entityId,
      String eventType,
      String eventTime,
      String properties,
      String columnsJson,
      boolean keyIsEntityId,
      int maxValueBytes,
      int maxEntityIdBytes) {
    this.schemaJson = schemaJson;
    this.roles = new String[] {eventId, entityId, eventType, eventTime};
    this.properties = properties;
    this.columns = pointers(columnsJson);
    this.keyIsEntityId = keyIsEntityId;
    this.maxValueBytes = maxValueBytes;
    this.maxEntityIdBytes = maxEntityIdBytes;
    SQLConf conf = SQLConf.get();
    this.allowDuplicateKeys = (Boolean) conf.getConf(SQLConf.VARIANT_ALLOW_DUPLICATE_KEYS());
    this.validateUnicode = (Boolean) conf.getConf(SQLConf.VARIANT_VALIDATE_UNICODE_IN_JSON_PARSING());
    compiled(); // a schema that does not compile fails here, on the driver, before any task
  }

  private Compiled compiled() {
    if (compiled == null) {
      String key =
          String.join(
              "\u0000",
              schemaJson,
              Arrays.toString(roles),
              String.valueOf(properties),
              Arrays.toString(columns));
      compiled = COMPILED.computeIfAbsent(key, k -> new Compiled(schemaJson, roles, properties, columns));
    }
    return compiled;
  }

  /** A record's check: {@link #RESULT}, its reasons null when it passes. */
  @Override
  public Row call(byte[] key, byte[] value) {
    if (key == null && keyIsEntityId) return reject("null_key");
    if (value != null && value.length > maxValueBytes)
      return reject("oversized: value is larger than " + maxValueBytes + " bytes");
    if (value == null) return reject("null_value");
    if (!Utf8.isValid(value)) return reject("not_utf8");
    return checkText(key, new String(value, StandardCharsets.UTF_8));
  }

  /** The check of a value's text: everything {@link #call} checks after the value's size and UTF-8. */
  private Row checkText(byte[] key, String text) {
    Compiled c = compiled();
    Parsed parsed = c.parse(text);
    if (parsed.reason != null) return reject(parsed.reason);
    return checkDocument(key, c, parsed.doc, parsed.spans);
  }

  /**
   * The check of a value already read as a JSON document (an Avro record, {@link AvroJson#tree}): the key rule,
   * then everything {@link #call} checks after parsing the text.
   */
  Row checkTree(byte[] key, JsonNode doc) {
    if (key == null && keyIsEntityId) return reject("null_key");
    Compiled c = compiled();
    return checkDocument(key, c, doc, c.spansOf(doc));
  }

  private Row checkDocument(byte[] key, Compiled c, JsonNode doc, String[] spans) {
    if (!doc.isObject()) return reject("not_an_object");

    String[] texts = new String[4];
    for (int i = 0; i < 4; i++) {
      if (c.roles[i] == null) continue;
      JsonNode node = doc.at(c.roles[i]);
      if (node.isMissingNode() || node.isNull()) return reject("missing_field: " + c.names[i]);
      if (!node.isTextual()) return reject("wrong_type: " + c.names[i] + " must be a string");
      texts[i] = node.textValue();
    }
    for (int i = 0; i < 3; i++) { // the ids and the type; an empty time is a bad time
      if (texts[i] != null && texts[i].isEmpty()) return reject("missing_field: " + c.names[i] + " is empty");
    }
    String entity = texts[1];
    if (entity.indexOf('\0') >= 0) return reject("bad_entity_id: entity_id contains a NUL character");
    byte[] entityBytes = entity.getBytes(StandardCharsets.UTF_8);
    if (entityBytes.length > maxEntityIdBytes)
      return reject("bad_entity_id: entity_id is longer than " + maxEntityIdBytes + " bytes");

    String late = null;
    if (c.properties != null) {
      JsonNode node = doc.at(c.properties);
      if (!node.isMissingNode() && !node.isNull() && !node.isObject())
        late = "wrong_type: " + c.propertiesName + " must be an object";
    }
    // The boolean format stops at the first failure; the full one runs only to name it.
    if (late == null && !c.schema.validate(doc, OutputFormat.BOOLEAN)) late = reason(c.schema.validate(doc));
    if (late == null && keyIsEntityId && !Arrays.equals(key, entityBytes))
      late = "key_mismatch: key is not the entity_id";
    String properties = null;
    if (spans[0] != null) {
      properties = VariantJson.canonical(spans[0], allowDuplicateKeys, validateUnicode);
      if (properties == null) return reject("invalid_json");
    }
    String[] columnTexts = Arrays.copyOfRange(spans, 1, spans.length);
    return RowFactory.create(null, late, texts[0], texts[1], texts[2], texts[3], properties, columnTexts);
  }

  private static Row reject(String reason) {
    return RowFactory.create(reason, null, null, null, null, null, null, null);
  }

  /** The pointers of a JSON array of strings (the typed columns'). */
  private static String[] pointers(String json) {
    try {
      JsonNode array = new ObjectMapper().readTree(json);
      String[] out = new String[array.size()];
      for (int i = 0; i < out.length; i++) out[i] = array.get(i).textValue();
      return out;
    } catch (IOException e) {
      throw new IllegalArgumentException("the typed columns' pointers must be a JSON array of strings: " + json, e);
    }
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

  /** A pointer as a quarantine reason names it: without its leading slash ("order/id"). */
  static String named(String pointer) {
    return pointer.startsWith("/") ? pointer.substring(1) : pointer;
  }

  /** "a string", "an object or null" from a schema's {@code type}. */
  private static String expected(JsonNode schemaNode) {
    JsonNode types = schemaNode != null && schemaNode.has("type") ? schemaNode.get("type") : schemaNode;
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

  /**
   * A parsed value: the document and the texts at the spans' pointers (the properties', then each
   * typed column's; null where the value has none), or why it is not JSON.
   */
  private static final class Parsed {
    final JsonNode doc;
    final String[] spans;
    final String reason;

    Parsed(JsonNode doc, String[] spans, String reason) {
      this.doc = doc;
      this.spans = spans;
      this.reason = reason;
    }
  }

  /**
   * One step of the pointers whose text is kept: the steps below it, by key (an array's index as
   * its decimal text, as a JSON pointer writes it), and the span it ends (-1: none).
   */
  private static final class Step {
    final Map<String, Step> below = new HashMap<>();
    int span = -1;

    static Step of(String[] pointers) {
      Step root = new Step();
      for (int i = 0; i < pointers.length; i++) {
        if (pointers[i] == null) continue;
        Step step = root;
        for (JsonPointer p = JsonPointer.compile(pointers[i]); !p.matches(); p = p.tail())
          step = step.below.computeIfAbsent(p.getMatchingProperty(), k -> new Step());
        step.span = i;
      }
      return root.below.isEmpty() && root.span < 0 ? null : root;
    }
  }

  /** One contract, ready to check records: thread-safe, shared by the tasks of a JVM. */
  private static final class Compiled {
    final ObjectMapper mapper;
    final Schema schema;
    final JsonPointer[] roles;
    final String[] names;
    final JsonPointer properties;
    final String propertiesName;
    final int spans; // the properties' and the typed columns'
    final JsonPointer[] spanPointers; // where they are (an entry null: no properties)
    final Step kept; // the same, as steps of the parse (null: none)

    Compiled(String schemaJson, String[] rolePointers, String propertiesPointer, String[] columnPointers) {
      JsonFactory factory = JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
      mapper = new ObjectMapper(factory);
      schema = SchemaRegistry.withDefaultDialect(SpecificationVersion.DRAFT_2020_12).getSchema(schemaJson);
      schema.initializeValidators(); // now, once: the tasks of this JVM then share it, read-only
      roles = new JsonPointer[rolePointers.length];
      names = new String[rolePointers.length];
      for (int i = 0; i < rolePointers.length; i++) {
        if (rolePointers[i] == null) continue;
        roles[i] = JsonPointer.compile(rolePointers[i]);
        names[i] = named(rolePointers[i]);
      }
      properties = propertiesPointer == null ? null : JsonPointer.compile(propertiesPointer);
      propertiesName = propertiesPointer == null ? null : named(propertiesPointer);
      String[] pointers = new String[1 + columnPointers.length];
      pointers[0] = propertiesPointer;
      System.arraycopy(columnPointers, 0, pointers, 1, columnPointers.length);
      spans = pointers.length;
      spanPointers = new JsonPointer[spans];
      for (int i = 0; i < spans; i++) spanPointers[i] = pointers[i] == null ? null : JsonPointer.compile(pointers[i]);
      kept = Step.of(pointers);
    }

    /** The texts of a document's spans, as {@link #parse} keeps them from a value's text (null: no value there). */
    String[] spansOf(JsonNode doc) {
      String[] texts = new String[spans];
      for (int i = 0; i < spans; i++) {
        if (spanPointers[i] == null) continue;
        JsonNode node = doc.at(spanPointers[i]);
        if (node.isMissingNode()) continue;
        try {
          texts[i] = mapper.writeValueAsString(node);
        } catch (JsonProcessingException e) { // a tree of plain values always writes
          throw new IllegalStateException(e);
        }
      }
      return texts;
    }

    /** One JSON document and nothing after it, as Spark's parse_json reads text. */
    Parsed parse(String text) {
      String[] texts = new String[spans];
      JsonNode doc;
      try (JsonParser parser = mapper.getFactory().createParser(text)) {
        if (parser.nextToken() == null) return new Parsed(null, null, "invalid_json");
        doc = read(parser, text, kept, texts);
        // Jackson reads an escaped surrogate without its pair into the text; Spark refuses it.
        if (Json.hasUnpairedSurrogate(text, (int) parser.currentLocation().getCharOffset()))
          return new Parsed(null, null, "invalid_json");
        try {
          if (parser.nextToken() != null) return new Parsed(null, null, TEXT_AFTER);
        } catch (JsonProcessingException e) {
          return new Parsed(null, null, TEXT_AFTER);
        }
      } catch (IOException e) { // not JSON, a key twice in one object, or past Jackson's limits
        return new Parsed(null, null, "invalid_json");
      }
      return new Parsed(doc, texts, null);
    }

    /** The value at the parser's token as a tree; the texts of the spans at or below {@code step}. */
    private JsonNode read(JsonParser parser, String text, Step step, String[] texts) throws IOException {
      if (step == null) return mapper.readTree(parser);
      int start = (int) parser.currentTokenLocation().getCharOffset();
      JsonNode node;
      if (!step.below.isEmpty() && parser.currentToken() == JsonToken.START_OBJECT) {
        ObjectNode object = mapper.getNodeFactory().objectNode();
        for (String name = parser.nextFieldName(); name != null; name = parser.nextFieldName()) {
          parser.nextToken();
          object.set(name, read(parser, text, step.below.get(name), texts));
        }
        if (parser.currentToken() != JsonToken.END_OBJECT) throw new IOException("not an object's end");
        node = object;
      } else if (!step.below.isEmpty() && parser.currentToken() == JsonToken.START_ARRAY) {
        ArrayNode array = mapper.getNodeFactory().arrayNode();
        for (JsonToken token = parser.nextToken(); token != JsonToken.END_ARRAY; token = parser.nextToken()) {
          if (token == null) throw new IOException("not an array's end");
          array.add(read(parser, text, step.below.get(String.valueOf(array.size())), texts));
        }
        node = array;
      } else {
        node = mapper.readTree(parser); // a scalar's text is complete once read
      }
      if (step.span >= 0) texts[step.span] = text.substring(start, (int) parser.currentLocation().getCharOffset());
      return node;
    }
  }
}
