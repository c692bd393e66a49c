package io.ferrymq.spark;

import java.util.Map;

/**
 * A response frame: its header, and where its body lies in the frame's bytes (kept there, not
 * copied: the records are decoded straight from them).
 */
record RemotingResponse(int code, int opaque, String remark, Map<String, String> extFields,
                        byte[] frame, int bodyOffset, int bodyLength) {

    /** A header field as a long (Java's Long.parseLong); {@code fallback} when absent or not a number. */
    long longField(String name, long fallback) {
        String value = extFields.get(name);
        if (value == null || value.isEmpty()) {
            return fallback;
        }
        try {
            return Long.parseLong(value);
        } catch (NumberFormatException e) {
            return fallback;
        }
    }
}
