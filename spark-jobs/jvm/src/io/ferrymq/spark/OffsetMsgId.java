package io.ferrymq.spark;

import java.nio.charset.StandardCharsets;

import org.apache.spark.unsafe.types.UTF8String;

/**
 * The offset msgId (docs/wire-format.md#message-ids, ferrymq.common.message_id.offset_msg_id): upper-case hex of
 * the store host's IP (4 or 16 bytes) and port (i32), then the physical offset (i64). In a
 * record these bytes are stored just so, so the id is their hex.
 */
final class OffsetMsgId {

    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);

    /** {@code hostLength} bytes of store IP and port at {@code hostPos}, the 8 offset bytes at {@code offsetPos}. */
    static UTF8String of(byte[] record, int hostPos, int hostLength, int offsetPos) {
        byte[] hex = new byte[2 * (hostLength + 8)];
        int i = put(record, hostPos, hostLength, hex, 0);
        put(record, offsetPos, 8, hex, i);
        return UTF8String.fromBytes(hex);
    }

    private static int put(byte[] from, int pos, int length, byte[] hex, int at) {
        for (int k = 0; k < length; k++) {
            int b = from[pos + k] & 0xFF;
            hex[at++] = HEX[b >>> 4];
            hex[at++] = HEX[b & 0xF];
        }
        return at;
    }

    private OffsetMsgId() {
    }
}
