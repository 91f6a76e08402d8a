package io.icefjord.connect;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.kafka.connect.data.Date;
import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Time;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.json.JsonConverter;
import org.junit.jupiter.api.Test;

class SchemaCachingJsonConverterTest {
    private static final String[] TEXTS = {
        "", "plain", "h\u00e9 \"quoted\" back\\slash", "tab\tnew\nline\u0001", "\ud83d\ude00 emoji",
        "\u65e5\u672c\u8a9e", "</script>",
    };

    /** Every combination of the settings that change what JsonConverter writes. */
    private static List<Map<String, Object>> settings() {
        List<Map<String, Object>> all = new ArrayList<>();
        for (String format : new String[] {"BASE64", "NUMERIC"}) {
            for (boolean replaceNull : new boolean[] {true, false}) {
                Map<String, Object> config = new HashMap<>();
                config.put("schemas.enable", true);
                config.put("decimal.format", format);
                config.put("replace.null.with.default", replaceNull);
                all.add(config);
            }
        }
        return all;
    }

    private static JsonConverter configured(JsonConverter converter, Map<String, Object> config,
            boolean isKey) {
        converter.configure(config, isKey);
        return converter;
    }

    @Test
    void writesTheSameBytesAsJsonConverterForGeneratedSchemasAndValues() {
        Random random = new Random(20261126L);
        int compared = 0;
        for (Map<String, Object> config : settings()) {
            for (boolean isKey : new boolean[] {true, false}) {
                JsonConverter reference = configured(new JsonConverter(), config, isKey);
                JsonConverter cached = configured(new SchemaCachingJsonConverter(), config, isKey);
                for (int s = 0; s < 60; s++) {
                    Schema schema = struct(random, 0, "t" + s);
                    // Several values per schema: the first fills the cache, the rest hit it.
                    for (int v = 0; v < 8; v++) {
                        Object value = value(random, schema, 0);
                        byte[] expected = reference.fromConnectData("topic", schema, value);
                        byte[] actual = cached.fromConnectData("topic", schema, value);
                        assertArrayEquals(expected, actual, () -> new String(expected,
                                StandardCharsets.UTF_8));
                        compared++;
                    }
                }
            }
        }
        assertEquals(settings().size() * 2 * 60 * 8, compared);
    }

    @Test
    void cachesOneEntryPerSchemaObjectAndStartsOverWhenFull() {
        Map<String, Object> config = settings().get(0);
        SchemaCachingJsonConverter cached = new SchemaCachingJsonConverter();
        cached.configure(config, false);
        JsonConverter reference = configured(new JsonConverter(), config, false);
        Random random = new Random(7L);
        Schema schema = struct(random, 0, "one");
        for (int i = 0; i < 5; i++) {
            cached.fromConnectData("topic", schema, value(random, schema, 0));
        }
        assertEquals(1, cached.cachedSchemas());
        for (int i = 1; i < SchemaCachingJsonConverter.MAX_CACHED_SCHEMAS; i++) {
            Schema other = SchemaBuilder.struct().name("s" + i).field("id", Schema.INT32_SCHEMA)
                    .build();
            cached.fromConnectData("topic", other, new Struct(other).put("id", i));
        }
        assertEquals(SchemaCachingJsonConverter.MAX_CACHED_SCHEMAS, cached.cachedSchemas());
        Schema fresh = struct(random, 0, "fresh");
        Object value = value(random, fresh, 0);
        // Full: the cache starts over with the next new schema; the bytes stay JsonConverter's.
        assertArrayEquals(reference.fromConnectData("topic", fresh, value),
                cached.fromConnectData("topic", fresh, value));
        assertEquals(1, cached.cachedSchemas());
    }

    @Test
    void leavesWhatItDoesNotCacheToJsonConverter() {
        Map<String, Object> config = settings().get(0);
        SchemaCachingJsonConverter cached = new SchemaCachingJsonConverter();
        cached.configure(config, false);
        JsonConverter reference = configured(new JsonConverter(), config, false);
        SchemaBuilder builder = SchemaBuilder.struct().name("mutable").field("a", Schema.STRING_SCHEMA);
        Struct unbuilt = new Struct(builder).put("a", "x");
        Map<String, Object> schemaless = new LinkedHashMap<>();
        schemaless.put("k", List.of(1, 2));
        Object[][] cases = {
            {null, null},  // a tombstone
            {Schema.OPTIONAL_STRING_SCHEMA, null},
            {null, schemaless},
            {builder, unbuilt},  // a SchemaBuilder can still change: not cached
        };
        for (Object[] c : cases) {
            assertArrayEquals(reference.fromConnectData("topic", (Schema) c[0], c[1]),
                    cached.fromConnectData("topic", (Schema) c[0], c[1]));
        }
        assertEquals(0, cached.cachedSchemas());

        Map<String, Object> off = new HashMap<>(config);
        off.put("schemas.enable", false);
        cached = new SchemaCachingJsonConverter();
        cached.configure(off, false);
        reference = configured(new JsonConverter(), off, false);
        Schema schema = struct(new Random(3L), 0, "off");
        Object value = value(new Random(4L), schema, 0);
        assertArrayEquals(reference.fromConnectData("topic", schema, value),
                cached.fromConnectData("topic", schema, value));
        assertEquals(0, cached.cachedSchemas());
    }

    // -- generators ------------------------------------------------------------------------

    private static Schema struct(Random random, int depth, String name) {
        SchemaBuilder builder = SchemaBuilder.struct().name("db.shop." + name);
        if (random.nextBoolean()) {
            builder.version(1 + random.nextInt(3)).doc("a \"doc\"");
        }
        if (random.nextBoolean()) {
            builder.parameter("connect.name", name).parameter("x", "\u00e9");
        }
        int fields = 1 + random.nextInt(depth == 0 ? 12 : 4);
        for (int i = 0; i < fields; i++) {
            builder.field("f" + i + (random.nextInt(5) == 0 ? "_\u00fc" : ""),
                    field(random, depth, name + "_" + i));
        }
        if (random.nextBoolean()) {
            builder.optional();
        }
        return builder.build();
    }

    private static Schema field(Random random, int depth, String name) {
        int kind = random.nextInt(depth < 2 ? 17 : 14);
        SchemaBuilder builder;
        switch (kind) {
            case 0: builder = SchemaBuilder.int8(); break;
            case 1: builder = SchemaBuilder.int16(); break;
            case 2: builder = SchemaBuilder.int32(); break;
            case 3: builder = SchemaBuilder.int64(); break;
            case 4: builder = SchemaBuilder.float32(); break;
            case 5: builder = SchemaBuilder.float64(); break;
            case 6: builder = SchemaBuilder.bool(); break;
            case 7: builder = SchemaBuilder.string(); break;
            case 8: builder = SchemaBuilder.bytes(); break;
            case 9: builder = Decimal.builder(random.nextInt(6)); break;
            case 10: builder = Date.builder(); break;
            case 11: builder = Time.builder(); break;
            case 12: builder = Timestamp.builder(); break;
            case 13: builder = SchemaBuilder.string().name("io.debezium.data.Json").version(1); break;
            case 14: builder = SchemaBuilder.array(field(random, depth + 1, name + "_i")); break;
            case 15: builder = random.nextBoolean()
                    ? SchemaBuilder.map(Schema.STRING_SCHEMA, field(random, depth + 1, name + "_v"))
                    : SchemaBuilder.map(Schema.INT32_SCHEMA, field(random, depth + 1, name + "_v"));
                break;
            default:
                return struct(random, depth + 1, name);
        }
        if (kind < 14 && random.nextInt(4) == 0) {
            Object fallback = value(random, builder.build(), depth + 1);
            if (fallback != null) {
                builder.defaultValue(fallback);
            }
        }
        if (random.nextBoolean()) {
            builder.optional();
        }
        return builder.build();
    }

    private static Object value(Random random, Schema schema, int depth) {
        if (schema.isOptional() && random.nextInt(5) == 0) {
            return null;
        }
        String name = schema.name();
        if (Decimal.LOGICAL_NAME.equals(name)) {
            int scale = Integer.parseInt(schema.parameters().get(Decimal.SCALE_FIELD));
            return new BigDecimal(BigInteger.valueOf(random.nextLong()), scale);
        }
        if (Date.LOGICAL_NAME.equals(name)) {
            return Date.toLogical(schema, random.nextInt(40_000) - 10_000);
        }
        if (Time.LOGICAL_NAME.equals(name)) {
            return Time.toLogical(schema, random.nextInt(86_400_000));
        }
        if (Timestamp.LOGICAL_NAME.equals(name)) {
            return Timestamp.toLogical(schema, random.nextLong() / 1000);
        }
        switch (schema.type()) {
            case INT8: return (byte) random.nextInt();
            case INT16: return (short) random.nextInt();
            case INT32: return random.nextInt();
            case INT64: return random.nextLong();
            case FLOAT32: return random.nextFloat() * 1e6f - 5e5f;
            case FLOAT64: return random.nextInt(10) == 0 ? 1e-300 : random.nextGaussian() * 1e9;
            case BOOLEAN: return random.nextBoolean();
            case STRING: return TEXTS[random.nextInt(TEXTS.length)];
            case BYTES: {
                byte[] bytes = new byte[random.nextInt(40)];
                random.nextBytes(bytes);
                return bytes;
            }
            case ARRAY: {
                List<Object> items = new ArrayList<>();
                for (int i = random.nextInt(4); i > 0; i--) {
                    items.add(value(random, schema.valueSchema(), depth + 1));
                }
                return items;
            }
            case MAP: {
                Map<Object, Object> entries = new LinkedHashMap<>();
                for (int i = random.nextInt(4); i > 0; i--) {
                    Object key = value(random, schema.keySchema(), depth + 1);
                    entries.put(key, value(random, schema.valueSchema(), depth + 1));
                }
                return entries;
            }
            case STRUCT: {
                Struct struct = new Struct(schema);
                for (Field field : schema.fields()) {
                    struct.put(field, value(random, field.schema(), depth + 1));
                }
                return struct;
            }
            default:
                throw new IllegalArgumentException("no generator for " + schema.type());
        }
    }
}
