package io.tidemark.contract;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Writer schemas by id from a Confluent-compatible schema registry ({@code GET <url>/schemas/ids/<id>}), as
 * the Avro check's tasks need them: each id fetched once in this JVM (a registry never changes an id's
 * schema), an id the registry does not know answered null. Credentials are the URL's user information,
 * sent as HTTP basic authentication; messages name the URL without them.
 */
final class RegistrySchemas {
  private static final Duration TIMEOUT = Duration.ofSeconds(10);
  private static final Map<String, String> FETCHED = new ConcurrentHashMap<>();
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static volatile HttpClient client;

  private RegistrySchemas() {}

  /** The schema text of {@code id} in the registry at {@code url}; null when it does not know the id. */
  static String schema(String url, int id) {
    String key = url + "\u0000" + id;
    String found = FETCHED.get(key);
    if (found != null) return found;
    found = fetch(url, id);
    if (found != null) FETCHED.put(key, found);
    return found;
  }

  private static String fetch(String url, int id) {
    URI base = URI.create(url.endsWith("/") ? url : url + "/");
    URI plain = URI.create(base.getScheme() + "://" + base.getHost() + (base.getPort() < 0 ? "" : ":" + base.getPort())
        + base.getRawPath());
    HttpRequest.Builder request = HttpRequest.newBuilder(plain.resolve("schemas/ids/" + id))
        .timeout(TIMEOUT)
        .header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
    String user = base.getRawUserInfo();
    if (user != null) {
      String decoded = URLDecoder.decode(user.replace("+", "%2B"), StandardCharsets.UTF_8);
      request.header("Authorization", "Basic " + Base64.getEncoder().encodeToString(decoded.getBytes(StandardCharsets.UTF_8)));
    }
    HttpResponse<String> response;
    try {
      response = http().send(request.GET().build(), HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new IllegalStateException("the schema registry at " + plain + " does not answer (" + e + ")");
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while asking the schema registry at " + plain);
    }
    if (response.statusCode() == 404) return null;
    if (response.statusCode() != 200)
      throw new IllegalStateException(
          "the schema registry at " + plain + " answered HTTP " + response.statusCode() + " for schema id " + id);
    try {
      JsonNode schema = MAPPER.readTree(response.body()).get("schema");
      if (schema == null || !schema.isTextual()) throw new IOException("no schema in its answer");
      return schema.textValue();
    } catch (IOException e) {
      throw new IllegalStateException("the schema registry at " + plain + " answered schema id " + id + " oddly: " + e);
    }
  }

  private static HttpClient http() {
    if (client == null) {
      synchronized (RegistrySchemas.class) {
        if (client == null) client = HttpClient.newBuilder().connectTimeout(TIMEOUT).build();
      }
    }
    return client;
  }
}
