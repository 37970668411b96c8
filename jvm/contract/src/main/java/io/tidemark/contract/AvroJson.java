package io.tidemark.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.StreamWriteFeature;
import java.io.IOException;
import java.io.StringWriter;
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
 * An Avro datum as the JSON text the contract check reads: a record is an object of its fields (in
 * the reader schema's order), a map an object, an array an array, a union its branch's value (not
 * Avro's {@code {"type": value}} JSON encoding), an enum its symbol, bytes and fixed base64.
 *
 * <p>Logical types are written exactly, never through a double: a decimal as a JSON number of its
 * digits and scale ({@code 12.30}), so a typed column {@code decimal(18,2)} reads it as written;
 * {@code timestamp-millis}/{@code -micros} as ISO-8601 in UTC with a {@code Z} (an event time); the
 * local timestamps without an offset; {@code date} as {@code 2026-03-01}; {@code time-*} as
 * {@code 12:00:00.123}; {@code uuid} as its text (a fixed(16) one too). A float or double that JSON
 * cannot hold (NaN, infinities) is written as a string.
 */
final class AvroJson {
  private static final JsonFactory FACTORY =
      JsonFactory.builder().enable(StreamWriteFeature.WRITE_BIGDECIMAL_AS_PLAIN).build();

  private AvroJson() {}

  /** The JSON text of {@code datum}, read with {@code schema}. */
  static String write(Object datum, Schema schema) {
    StringWriter out = new StringWriter();
    try (JsonGenerator json = FACTORY.createGenerator(out)) {
      value(json, datum, schema);
    } catch (IOException e) { // a StringWriter does not fail
      throw new IllegalStateException(e);
    }
    return out.toString();
  }

  private static void value(JsonGenerator json, Object datum, Schema schema) throws IOException {
    LogicalType logical = schema.getLogicalType();
    if (logical != null && datum != null && logicalValue(json, datum, schema, logical)) return;
    switch (schema.getType()) {
      case NULL:
        json.writeNull();
        break;
      case BOOLEAN:
        json.writeBoolean((Boolean) datum);
        break;
      case INT:
        json.writeNumber((Integer) datum);
        break;
      case LONG:
        json.writeNumber((Long) datum);
        break;
      case FLOAT:
        floating(json, ((Float) datum).doubleValue(), Float.toString((Float) datum));
        break;
      case DOUBLE:
        floating(json, (Double) datum, Double.toString((Double) datum));
        break;
      case STRING:
      case ENUM:
        json.writeString(datum.toString());
        break;
      case BYTES:
        json.writeString(Base64.getEncoder().encodeToString(bytes((ByteBuffer) datum)));
        break;
      case FIXED:
        json.writeString(Base64.getEncoder().encodeToString(((GenericFixed) datum).bytes()));
        break;
      case ARRAY:
        json.writeStartArray();
        for (Object item : (Collection<?>) datum) value(json, item, schema.getElementType());
        json.writeEndArray();
        break;
      case MAP:
        json.writeStartObject();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) datum).entrySet()) {
          json.writeFieldName(entry.getKey().toString());
          value(json, entry.getValue(), schema.getValueType());
        }
        json.writeEndObject();
        break;
      case RECORD:
        IndexedRecord record = (IndexedRecord) datum;
        json.writeStartObject();
        for (Schema.Field field : schema.getFields()) {
          json.writeFieldName(field.name());
          value(json, record.get(field.pos()), field.schema());
        }
        json.writeEndObject();
        break;
      case UNION:
        value(json, datum, schema.getTypes().get(GenericData.get().resolveUnion(schema, datum)));
        break;
      default:
        throw new IllegalStateException("an Avro type the decoder does not know: " + schema.getType());
    }
  }

  /** Writes a logical type's value; false for a logical type written as its underlying type. */
  private static boolean logicalValue(JsonGenerator json, Object datum, Schema schema, LogicalType logical)
      throws IOException {
    if (logical instanceof LogicalTypes.Decimal) {
      byte[] unscaled =
          schema.getType() == Schema.Type.FIXED ? ((GenericFixed) datum).bytes() : bytes((ByteBuffer) datum);
      json.writeNumber(new BigDecimal(new BigInteger(unscaled), ((LogicalTypes.Decimal) logical).getScale()));
      return true;
    }
    if ("uuid".equals(logical.getName()) && schema.getType() == Schema.Type.FIXED) {
      ByteBuffer bytes = ByteBuffer.wrap(((GenericFixed) datum).bytes());
      json.writeString(new UUID(bytes.getLong(), bytes.getLong()).toString());
      return true;
    }
    String text = temporal(logical.getName(), datum);
    if (text == null) return false; // a uuid string, or a logical type Avro does not define
    json.writeString(text);
    return true;
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

  private static void floating(JsonGenerator json, double value, String text) throws IOException {
    if (Double.isNaN(value) || Double.isInfinite(value)) json.writeString(text);
    else json.writeNumber(text); // the shortest text that reads back as the same value
  }

  private static byte[] bytes(ByteBuffer buffer) {
    ByteBuffer view = buffer.duplicate();
    byte[] out = new byte[view.remaining()];
    view.get(out);
    return out;
  }
}
