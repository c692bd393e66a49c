package io.ferrymq.spark;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A record's properties ({@code name 0x01 value 0x02 ...}, docs/wire-format.md#properties), parsed as the record
 * codec parses them: UTF-8 with bad sequences replaced, a trailing 0x02 accepted, entries with
 * an empty name or value dropped, a repeated name keeping its last value. MIN_OFFSET and
 * MAX_OFFSET are left out: the pull consumer adds them to describe a pull, not the message.
 */
final class MessageProperties {

    private final Map<String, UTF8String> values = new LinkedHashMap<>();

    MessageProperties(byte[] buf, int offset, int length) {
        String text = new String(buf, offset, length, StandardCharsets.UTF_8);
        int n = text.length();
        for (int from = 0; from <= n; ) {
            int itemEnd = text.indexOf('\u0002', from);
            if (itemEnd < 0) {
                itemEnd = n;
            }
            int separator = text.indexOf('\u0001', from);
            if (separator >= 0 && separator < itemEnd) {
                String name = text.substring(from, separator);
                String value = text.substring(separator + 1, itemEnd);
                if (!name.isEmpty() && !value.isEmpty() && !name.equals("MIN_OFFSET") && !name.equals("MAX_OFFSET")) {
                    values.put(name, UTF8String.fromString(value));
                }
            }
            from = itemEnd + 1;
        }
    }

    /** The value of a property, or null. */
    UTF8String get(String name) {
        return values.get(name);
    }

    MapData toMapData() {
        Object[] names = new Object[values.size()];
        Object[] vals = new Object[values.size()];
        int i = 0;
        for (Map.Entry<String, UTF8String> e : values.entrySet()) {
            names[i] = UTF8String.fromString(e.getKey());
            vals[i++] = e.getValue();
        }
        return new ArrayBasedMapData(new GenericArrayData(names), new GenericArrayData(vals));
    }
}
