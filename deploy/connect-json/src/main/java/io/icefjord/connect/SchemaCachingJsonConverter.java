package io.icefjord.connect;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;

import org.apache.kafka.connect.data.ConnectSchema;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.json.JsonConverterConfig;
import org.apache.kafka.connect.json.JsonSerializer;

/**
 * Kafka's {@link JsonConverter}, byte for byte, with each schema's JSON written once.
 *
 * <p>With {@code schemas.enable=true}, {@code JsonConverter} builds the envelope
 * {@code {"schema":S,"payload":P}} as a Jackson tree and serializes all of it for every
 * record. It caches the schema's tree, not its bytes, so a Debezium record spends most of
 * its serialization on a schema that is the same for every change of a table. This
 * converter keeps the serialized schema per schema object and writes only the payload per
 * record, with a second {@code JsonConverter} (same settings, {@code schemas.enable=false}),
 * which is exactly the {@code P} of the envelope.
 *
 * <p>Only immutable schemas ({@link ConnectSchema}, what {@code SchemaBuilder.build()} and
 * Debezium give) are cached, by identity; a record without a schema or without a value, or
 * a converter with schemas disabled, goes through {@code JsonConverter} itself. Reading
 * ({@code toConnectData}) and headers are {@code JsonConverter}'s.
 */
public class SchemaCachingJsonConverter extends JsonConverter {
    /** Distinct schema objects kept; past this the cache starts over (schemas change rarely). */
    static final int MAX_CACHED_SCHEMAS = 1024;

    private static final byte[] SCHEMA_FIELD = "{\"schema\":".getBytes(StandardCharsets.UTF_8);
    private static final byte[] PAYLOAD_FIELD = ",\"payload\":".getBytes(StandardCharsets.UTF_8);

    private final JsonConverter payloadConverter = new JsonConverter();
    private final JsonSerializer serializer = new JsonSerializer();
    private final Map<Schema, byte[]> schemaBytes = new IdentityHashMap<>();
    private boolean schemasEnabled;

    @Override
    public void configure(Map<String, ?> configs) {
        super.configure(configs);
        schemasEnabled = new JsonConverterConfig(configs).schemasEnabled();
        Map<String, Object> withoutEnvelope = new HashMap<>(configs);
        withoutEnvelope.put(JsonConverterConfig.SCHEMAS_ENABLE_CONFIG, false);
        payloadConverter.configure(withoutEnvelope);
    }

    @Override
    public byte[] fromConnectData(String topic, Schema schema, Object value) {
        if (!schemasEnabled || !(schema instanceof ConnectSchema) || value == null) {
            return super.fromConnectData(topic, schema, value);
        }
        byte[] head = schemaBytes.get(schema);
        if (head == null) {
            if (schemaBytes.size() >= MAX_CACHED_SCHEMAS) {
                schemaBytes.clear();
            }
            head = serializer.serialize(topic, asJsonSchema(schema));
            schemaBytes.put(schema, head);
        }
        byte[] payload = payloadConverter.fromConnectData(topic, schema, value);
        byte[] out = new byte[SCHEMA_FIELD.length + head.length + PAYLOAD_FIELD.length
                + payload.length + 1];
        int at = 0;
        System.arraycopy(SCHEMA_FIELD, 0, out, at, SCHEMA_FIELD.length);
        at += SCHEMA_FIELD.length;
        System.arraycopy(head, 0, out, at, head.length);
        at += head.length;
        System.arraycopy(PAYLOAD_FIELD, 0, out, at, PAYLOAD_FIELD.length);
        at += PAYLOAD_FIELD.length;
        System.arraycopy(payload, 0, out, at, payload.length);
        at += payload.length;
        out[at] = '}';
        return out;
    }

    /** How many schemas' bytes are kept (for the tests). */
    int cachedSchemas() {
        return schemaBytes.size();
    }

    @Override
    public void close() {
        payloadConverter.close();
        serializer.close();
        super.close();
    }
}
