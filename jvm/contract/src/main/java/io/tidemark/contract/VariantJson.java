package io.tidemark.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.IOException;
import java.time.ZoneOffset;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;

/**
 * JSON text as Spark's Variant writes it back: {@code to_json(try_parse_json(text))}, in one call.
 *
 * <p>The text is read by Spark's own Variant builder (so a number, a string or a key becomes what
 * {@code parse_json} makes of it) and written as {@code Variant.toJson} writes it: object keys
 * sorted, an integer as a long, a decimal in plain notation, a double as Java prints it (a
 * non-finite one quoted), strings escaped as Jackson's default generator escapes them. Spark's
 * functions build a new Jackson factory for every document they parse and for every string they
 * write, which cost more than the whole contract check; this class shares one.
 */
final class VariantJson {
  private VariantJson() {}

  /** Jackson's defaults, as {@code VariantBuilder.parseJson(String, ...)} reads text. */
  private static final JsonFactory FACTORY = new JsonFactory();

  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  /**
   * {@code text} (one JSON value) in the Variant's canonical form, or null where {@code
   * parse_json} refuses it (try_parse_json's null). The two flags are the session's {@code
   * spark.sql.variant.allowDuplicateKeys} and {@code validateUnicodeInJsonParsing}.
   */
  static String canonical(String text, boolean allowDuplicateKeys, boolean validateUnicode) {
    Variant variant;
    try (JsonParser parser = FACTORY.createParser(text)) {
      parser.nextToken();
      variant = VariantBuilder.parseJson(parser, allowDuplicateKeys, validateUnicode);
    } catch (IOException | RuntimeException e) { // as try_parse_json: malformed, or past the size limit
      return null;
    }
    StringBuilder out = new StringBuilder(text.length());
    write(variant, out);
    return out.toString();
  }

  private static void write(Variant value, StringBuilder out) {
    switch (value.getType()) {
      case OBJECT:
        out.append('{');
        for (int i = 0; i < value.objectSize(); i++) {
          if (i > 0) out.append(',');
          Variant.ObjectField field = value.getFieldAtIndex(i);
          string(field.key, out);
          out.append(':');
          write(field.value, out);
        }
        out.append('}');
        break;
      case ARRAY:
        out.append('[');
        for (int i = 0; i < value.arraySize(); i++) {
          if (i > 0) out.append(',');
          write(value.getElementAtIndex(i), out);
        }
        out.append(']');
        break;
      case NULL:
        out.append("null");
        break;
      case BOOLEAN:
        out.append(value.getBoolean());
        break;
      case LONG:
        out.append(value.getLong());
        break;
      case STRING:
        string(value.getString(), out);
        break;
      case DOUBLE:
        double d = value.getDouble();
        if (Double.isFinite(d)) out.append(d);
        else out.append('"').append(d).append('"');
        break;
      case DECIMAL:
        out.append(value.getDecimal().toPlainString());
        break;
      default: // not a type parse_json makes; Spark's own writer
        out.append(value.toJson(ZoneOffset.UTC));
    }
  }

  /**
   * A string as Jackson's default generator writes it: quoted; {@code "} and {@code \} escaped;
   * control characters as the short escapes (b t n f r) or as u00XX (upper-case hex), each after a
   * backslash; nothing else.
   */
  private static void string(String s, StringBuilder out) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c >= 0x20 && c != '"' && c != '\\') {
        out.append(c);
        continue;
      }
      out.append('\\');
      switch (c) {
        case '"':
        case '\\':
          out.append(c);
          break;
        case '\b':
          out.append('b');
          break;
        case '\t':
          out.append('t');
          break;
        case '\n':
          out.append('n');
          break;
        case '\f':
          out.append('f');
          break;
        case '\r':
          out.append('r');
          break;
        default:
          out.append("u00").append(HEX[c >> 4]).append(HEX[c & 0xF]);
      }
    }
    out.append('"');
  }
}
