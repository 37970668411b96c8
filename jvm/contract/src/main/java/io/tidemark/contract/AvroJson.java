package io.tidemark.contract;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.util.RawValue;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.ZoneOffset;
import java.util.Base64;
import java.util.Collection;
import java.util.Map;
import java.util.UUID;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;

/**
 * An Avro datum as the JSON document the contract check reads (a Jackson tree, never text parsed again): a
 * record is an object of its fields (in the reader schema's order), a map an object, an array an array, a
 * union its branch's value (not Avro's {@code {"type": value}} JSON encoding), an enum its symbol, bytes and
 * fixed base64.
 *
 * <p>Logical types are written exactly, never through a double: a decimal as a JSON number of its
 * digits and scale ({@code 12.30}), so a typed column {@code decimal(18,2)} reads it as written;
 * {@code timestamp-millis}/{@code -micros} as ISO-8601 in UTC with a {@code Z} (an event time); the
 * local timestamps without an offset; {@code date} as {@code 2026-03-01}; {@code time-*} as
 * {@code 12:00:00.123}; {@code uuid} as its text (a fixed(16) one too). A float or double is the shortest
 * text that reads back as it (as Java writes it); one JSON cannot hold (NaN, infinities) is a string.
 */
final class AvroJson {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private AvroJson() {}

  /** The JSON document of {@code datum}, read with {@code schema}. */
  static JsonNode tree(Object datum, Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical != null && datum != null) {
      JsonNode node = logicalValue(datum, schema, logical);
      if (node != null) return node;
    }
    switch (schema.getType()) {
      case NULL:
        return NODES.nullNode();
      case BOOLEAN:
        return NODES.booleanNode((Boolean) datum);
      case INT:
        return NODES.numberNode((Integer) datum);
      case LONG:
        return NODES.numberNode((Long) datum);
      case FLOAT:
        return floating(((Float) datum).doubleValue(), Float.toString((Float) datum));
      case DOUBLE:
        return floating((Double) datum, Double.toString((Double) datum));
      case STRING:
      case ENUM:
        return NODES.textNode(datum.toString());
      case BYTES:
        return NODES.textNode(Base64.getEncoder().encodeToString(bytes((ByteBuffer) datum)));
      case FIXED:
        return NODES.textNode(Base64.getEncoder().encodeToString(((GenericFixed) datum).bytes()));
      case ARRAY:
        ArrayNode array = NODES.arrayNode();
        for (Object item : (Collection<?>) datum) array.add(tree(item, schema.getElementType()));
        return array;
      case MAP:
        ObjectNode map = NODES.objectNode();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) datum).entrySet())
          map.set(entry.getKey().toString(), tree(entry.getValue(), schema.getValueType()));
        return map;
      case RECORD:
        IndexedRecord record = (IndexedRecord) datum;
        ObjectNode object = NODES.objectNode();
        for (Schema.Field field : schema.getFields()) object.set(field.name(), tree(record.get(field.pos()), field.schema()));
        return object;
      case UNION:
        return tree(datum, schema.getTypes().get(GenericData.get().resolveUnion(schema, datum)));
      default:
        throw new IllegalStateException("an Avro type the decoder does not know: " + schema.getType());
    }
  }

  /** A logical type's value; null for a logical type written as its underlying type. */
  private static JsonNode logicalValue(Object datum, Schema schema, LogicalType logical) {
    if (logical instanceof LogicalTypes.Decimal) {
      byte[] unscaled =
          schema.getType() == Schema.Type.FIXED ? ((GenericFixed) datum).bytes() : bytes((ByteBuffer) datum);
      BigDecimal decimal = new BigDecimal(new BigInteger(unscaled), ((LogicalTypes.Decimal) logical).getScale());
      return NODES.rawValueNode(new RawValue(decimal.toPlainString())); // its digits and scale, as written
    }
    if ("uuid".equals(logical.getName()) && schema.getType() == Schema.Type.FIXED) {
      ByteBuffer bytes = ByteBuffer.wrap(((GenericFixed) datum).bytes());
      return NODES.textNode(new UUID(bytes.getLong(), bytes.getLong()).toString());
    }
    String text = temporal(logical.getName(), datum);
    return text == null ? null : NODES.textNode(text); // null: a uuid string, or a logical type Avro does not define
  }

  /** The ISO-8601 text of a date, time or timestamp; null for another logical type. */
  private static String temporal(String logical, Object datum) {
    switch (logical) {
      case "date":
        return LocalDate.ofEpochDay((Integer) datum).toString();
      case "time-millis":
        return LocalTime.ofNanoOfDay((Integer) datum * 1_000_000L).toString();
      case "time-micros":
        return LocalTime.ofNanoOfDay((Long) datum * 1_000L).toString();
      case "timestamp-millis":
        return Instant.ofEpochMilli((Long) datum).toString();
      case "timestamp-micros":
        return micros((Long) datum).toString();
      case "local-timestamp-millis":
        return LocalDateTime.ofInstant(Instant.ofEpochMilli((Long) datum), ZoneOffset.UTC).toString();
      case "local-timestamp-micros":
        return LocalDateTime.ofInstant(micros((Long) datum), ZoneOffset.UTC).toString();
      default:
        return null;
    }
  }

  private static Instant micros(long value) {
    return Instant.ofEpochSecond(Math.floorDiv(value, 1_000_000L), Math.floorMod(value, 1_000_000L) * 1_000L);
  }

  private static JsonNode floating(double value, String text) {
    if (Double.isNaN(value) || Double.isInfinite(value)) return NODES.textNode(text);
    return NODES.rawValueNode(new RawValue(text)); // the shortest text that reads back as the same value
  }

  private static byte[] bytes(ByteBuffer buffer) {
    ByteBuffer view = buffer.duplicate();
    byte[] out = new byte[view.remaining()];
    view.get(out);
    return out;
  }
}
