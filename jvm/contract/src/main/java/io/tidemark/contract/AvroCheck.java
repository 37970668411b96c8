package io.tidemark.contract;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;
import org.apache.avro.SystemLimitException;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * A pipeline's contract check of one Kafka record whose value is Avro in Confluent's wire format (a
 * zero byte, the writer schema's 4-byte id, the Avro body), inside Spark's JVM.
 *
 * <p>The value is decoded with the writer schema its id names (from {@code writers}, the schemas the
 * driver fetched from the registry for this batch) and resolved to the pipeline's reader schema (the
 * subject's version the batch records); the record, as {@link AvroJson} writes it, then goes through
 * the pipeline's {@link RecordCheck} (its roles, entity id, typed columns and key; the Avro schema is
 * the contract's schema, so the JSON Schema there accepts everything). What cannot be read is a
 * reason of its own, in this order: {@code null_value}, {@code oversized}, {@code not_avro} (no
 * framing), {@code unknown_schema} (an id not in {@code writers}), {@code incompatible_schema} (a
 * writer schema the reader cannot resolve, logical types included, which Avro's own resolution
 * ignores), {@code bad_avro} (a truncated or corrupt body, or bytes after the record).
 */
public final class AvroCheck implements UDF2<byte[], byte[], Row>, Serializable {
  private static final long serialVersionUID = 1L;
  private static final int HEADER = 5;
  // Avro reads a length and allocates it before it reads the bytes: a corrupt value of a few bytes may
  // ask for a gigabyte (an OutOfMemoryError that fails the batch on every retry). Avro reads its limits
  // from these properties once, when it first checks one; a value is at most maxValueBytes long.
  private static final String[] LIMITS = {
    SystemLimitException.MAX_BYTES_LENGTH_PROPERTY,
    SystemLimitException.MAX_STRING_LENGTH_PROPERTY,
    SystemLimitException.MAX_COLLECTION_LENGTH_PROPERTY
  };

  /** The decoders of this JVM, by their registration: tasks share one; the newest few are kept. */
  private static final Map<String, Decoders> DECODERS = Collections.synchronizedMap(new LinkedHashMap<>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Decoders> eldest) {
      return size() > 16;
    }
  });
  /** Each task thread's binary decoder and last datum, used again for its next record (no allocation). */
  private static final ThreadLocal<BinaryDecoder> DECODER = new ThreadLocal<>();
  private static final ThreadLocal<Object> DATUM = new ThreadLocal<>();

  private final String writersJson; // {"<id>": "<schema>", ...}
  private final String readerJson;
  private final int readerVersion;
  private final RecordCheck check;
  private final int maxValueBytes;
  private final String registryUrl; // null: the writers are those of writersJson alone
  private final String registration; // this registration's own: an id the registry did not know stays unknown in it
  private transient Decoders decoders;

  /**
   * The check of one registration (a batch's): records whose writer schema is in {@code writersJson}, or, with
   * a {@code registryUrl}, in that registry (fetched by the tasks once per id and JVM; an id the registry does not
   * know is {@code unknown_schema} for the rest of this registration, and asked again by the next).
   */
  public AvroCheck(String writersJson, String readerJson, int readerVersion, RecordCheck check, int maxValueBytes,
      String registryUrl, String registration) {
    this.writersJson = writersJson;
    this.readerJson = readerJson;
    this.readerVersion = readerVersion;
    this.check = check;
    this.maxValueBytes = maxValueBytes;
    this.registryUrl = registryUrl;
    this.registration = registration;
    decoders(); // schemas that do not parse fail here, on the driver, before any task
  }

  private Decoders decoders() {
    if (decoders == null) {
      String key = registration + "\u0000" + readerVersion + "\u0000" + readerJson + "\u0000" + writersJson;
      decoders = DECODERS.computeIfAbsent(
          key, k -> new Decoders(writersJson, readerJson, readerVersion, maxValueBytes, registryUrl));
    }
    return decoders;
  }

  @Override
  public Row call(byte[] key, byte[] value) {
    if (value == null) return reject("null_value");
    if (value.length > maxValueBytes) return reject("oversized: value is larger than " + maxValueBytes + " bytes");
    if (value.length < HEADER || value[0] != 0)
      return reject("not_avro: no Confluent framing (a zero byte and a 4-byte schema id)");
    int id = ((value[1] & 0xff) << 24) | ((value[2] & 0xff) << 16) | ((value[3] & 0xff) << 8) | (value[4] & 0xff);
    Decoders.Writer writer = decoders().writer(id);
    if (writer == null) return reject("unknown_schema: schema id " + id + " is not in the registry");
    if (writer.incompatible != null) return reject(writer.incompatible);
    Object datum;
    BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(value, HEADER, value.length - HEADER, DECODER.get());
    DECODER.set(decoder);
    try {
      // Every writer resolves to the reader schema: the thread's last datum is of its shape, and is filled again.
      datum = writer.reader.read(DATUM.get(), decoder);
      if (!decoder.isEnd()) return reject("bad_avro: bytes after the record (schema id " + id + ")");
    } catch (IOException | RuntimeException e) { // a truncated body, a bad length or union index, ...
      DATUM.remove(); // a datum read halfway is not used again
      return reject("bad_avro: the body does not decode with schema id " + id + " (" + brief(e) + ")");
    }
    DATUM.set(datum);
    return check.checkTree(key, AvroJson.tree(datum, decoders().reader));
  }

  private static Row reject(String reason) {
    return RowFactory.create(reason, null, null, null, null, null, null, null);
  }

  private static String brief(Throwable e) {
    String message = e.getMessage();
    return e.getClass().getSimpleName() + (message == null ? "" : ": " + message.lines().findFirst().orElse(""));
  }

  /** The reader schema and, per writer schema id, its reader or why it cannot be read: shared by tasks. */
  private static final class Decoders {
    final Schema reader;
    final int readerVersion;
    final String registryUrl;
    final Map<Integer, Optional<Writer>> writers = new ConcurrentHashMap<>();

    Decoders(String writersJson, String readerJson, int readerVersion, int maxValueBytes, String registryUrl) {
      limitLengths(maxValueBytes);
      this.readerVersion = readerVersion;
      this.registryUrl = registryUrl;
      reader = new Schema.Parser().parse(readerJson);
      JsonNode ids;
      try {
        ids = new ObjectMapper().readTree(writersJson);
      } catch (IOException e) {
        throw new IllegalArgumentException("the writer schemas must be a JSON object of id to schema", e);
      }
      for (Iterator<Map.Entry<String, JsonNode>> it = ids.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> entry = it.next();
        int id = Integer.parseInt(entry.getKey());
        Schema writer = new Schema.Parser().parse(entry.getValue().textValue());
        writers.put(id, Optional.of(new Writer(writer, reader, id, readerVersion)));
      }
    }

    /** The writer of schema id {@code id}, null when neither the given schemas nor the registry have it. */
    Writer writer(int id) {
      return writers.computeIfAbsent(id, this::fetched).orElse(null);
    }

    private Optional<Writer> fetched(int id) {
      String text = registryUrl == null ? null : RegistrySchemas.schema(registryUrl, id);
      if (text == null) return Optional.empty();
      Schema writer;
      try {
        writer = new Schema.Parser().parse(text);
      } catch (RuntimeException e) { // the registry holds it, but Avro cannot parse it: no record of it can be read
        return Optional.of(new Writer("incompatible_schema: schema id " + id + " does not parse (" + brief(e) + ")"));
      }
      return Optional.of(new Writer(writer, reader, id, readerVersion));
    }

    /** A writer schema: its resolving reader, or why the reader schema cannot read it. */
    static final class Writer {
      final GenericDatumReader<Object> reader;
      final String incompatible;

      Writer(Schema writer, Schema reader, int id, int readerVersion) {
        SchemaCompatibility.SchemaPairCompatibility pair =
            SchemaCompatibility.checkReaderWriterCompatibility(reader, writer);
        String problem =
            pair.getType() == SchemaCompatibility.SchemaCompatibilityType.COMPATIBLE
                ? logicalMismatch(writer, reader, "")
                : pair.getResult().getIncompatibilities().get(0).getMessage()
                    + " at "
                    + pair.getResult().getIncompatibilities().get(0).getLocation();
        this.incompatible =
            problem == null
                ? null
                : "incompatible_schema: schema id " + id + " cannot be read as the reader schema (version "
                    + readerVersion + "): " + problem;
        this.reader = problem == null ? new GenericDatumReader<>(writer, reader) : null;
      }

      Writer(String problem) {
        this.incompatible = problem;
        this.reader = null;
      }
    }
  }

  /**
   * Avro's length limits at most {@code maxValueBytes} (a longer length in a value that size is corrupt);
   * fails when Avro read its limits before (another user of Avro in this JVM) and they are larger.
   */
  private static void limitLengths(int maxValueBytes) {
    for (String limit : LIMITS) {
      String set = System.getProperty(limit);
      if (set == null || Long.parseLong(set) > maxValueBytes) System.setProperty(limit, String.valueOf(maxValueBytes));
    }
    try {
      SystemLimitException.checkMaxBytesLength(maxValueBytes + 1L);
    } catch (SystemLimitException expected) {
      return;
    }
    throw new IllegalStateException(
        "Avro's length limits were read before tidemark's Avro check loaded: start the driver with -D"
            + LIMITS[0] + "=" + maxValueBytes + " (and the string and collection limits)");
  }

  /**
   * Where the logical types of a writer and a reader schema differ (a decimal's precision or scale,
   * a timestamp's unit, one side without): Avro resolves the underlying types alone and would read
   * such a value silently wrong. Null when they agree.
   */
  static String logicalMismatch(Schema writer, Schema reader, String at) {
    if (reader.getType() == Schema.Type.UNION || writer.getType() == Schema.Type.UNION) {
      for (Schema w : branches(writer)) {
        for (Schema r : branches(reader)) {
          if (w.getType() == r.getType() && (!named(w) || w.getFullName().equals(r.getFullName()))) {
            String found = logicalMismatch(w, r, at);
            if (found != null) return found;
          }
        }
      }
      return null;
    }
    if (!sameLogical(writer.getLogicalType(), reader.getLogicalType()))
      return "the writer's " + describe(writer) + " is read as " + describe(reader) + " at " + (at.isEmpty() ? "/" : at);
    switch (reader.getType()) {
      case RECORD:
        if (writer.getType() != Schema.Type.RECORD) return null;
        for (Schema.Field field : reader.getFields()) {
          Schema.Field source = writer.getField(field.name());
          for (Iterator<String> aliases = field.aliases().iterator(); source == null && aliases.hasNext(); )
            source = writer.getField(aliases.next());
          if (source == null) continue; // the reader's default
          String found = logicalMismatch(source.schema(), field.schema(), at + "/" + field.name());
          if (found != null) return found;
        }
        return null;
      case ARRAY:
        return writer.getType() == Schema.Type.ARRAY
            ? logicalMismatch(writer.getElementType(), reader.getElementType(), at + "/*")
            : null;
      case MAP:
        return writer.getType() == Schema.Type.MAP
            ? logicalMismatch(writer.getValueType(), reader.getValueType(), at + "/*")
            : null;
      default:
        return null;
    }
  }

  private static Iterable<Schema> branches(Schema schema) {
    return schema.getType() == Schema.Type.UNION ? schema.getTypes() : java.util.List.of(schema);
  }

  private static boolean named(Schema schema) {
    Schema.Type type = schema.getType();
    return type == Schema.Type.RECORD || type == Schema.Type.ENUM || type == Schema.Type.FIXED;
  }

  private static boolean sameLogical(LogicalType a, LogicalType b) {
    if (a == null || b == null) return a == b;
    if (a instanceof LogicalTypes.Decimal && b instanceof LogicalTypes.Decimal) {
      LogicalTypes.Decimal x = (LogicalTypes.Decimal) a, y = (LogicalTypes.Decimal) b;
      return x.getScale() == y.getScale() && x.getPrecision() <= y.getPrecision();
    }
    return Objects.equals(a.getName(), b.getName());
  }

  private static String describe(Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical instanceof LogicalTypes.Decimal) {
      LogicalTypes.Decimal d = (LogicalTypes.Decimal) logical;
      return "decimal(" + d.getPrecision() + "," + d.getScale() + ")";
    }
    return logical == null ? schema.getType().getName() : logical.getName();
  }
}
