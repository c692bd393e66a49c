package io.ferrymq.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Turns the CommitLog records of a pull body (docs/wire-format.md#commitlog-record, ferrymq.common.message) into rows
 * of {@link RowSchema#SCHEMA}, one record at a time, with the values the Python reader gives:
 * msgId = UNIQ_KEY else the offset msgId, keys/tags from the properties, compressed bodies
 * inflated, timestamps in microseconds. Records outside the segment's [first, end) are skipped.
 */
final class RecordDecoder {

    private static final int MESSAGE_MAGIC = 0xDAA320A7;
    private static final int BORNHOST_V6 = 0x10;
    private static final int STOREHOST_V6 = 0x20;
    private static final int FIXED_SIZE = 88;  // TOTALSIZE .. BODY length with IPv4 hosts
    private static final int MIN_RECORD_SIZE = FIXED_SIZE + 1 + 2;  // empty body, topic and properties
    private static final int QUEUE_ID_POS = 12;
    private static final int QUEUE_OFFSET_POS = 20;
    private static final int PHYSICAL_OFFSET_POS = 28;
    private static final int SYS_FLAG_POS = 36;
    private static final int BORN_TIMESTAMP_POS = 40;
    private static final int BORN_HOST_POS = 48;

    private final UTF8String brokerName;
    private final String label;
    private byte[] buf;
    private ByteBuffer view;
    private int start;
    private int pos;
    private int limit;
    private long first;
    private long end;
    private byte[] topicBytes = new byte[0];  // the last topic seen, decoded once (a queue's records share it)
    private UTF8String topic = UTF8String.EMPTY_UTF8;

    RecordDecoder(QueueRange range) {
        this.brokerName = UTF8String.fromString(range.brokerName());
        this.label = range.label();
    }

    void reset(Segment segment) {
        buf = segment.buf();
        view = ByteBuffer.wrap(buf);
        start = segment.offset();
        pos = start;
        limit = segment.offset() + segment.length();
        first = segment.first();
        end = segment.end();
    }

    /** The next wanted record of the segment as a row; null when the segment has no more. */
    InternalRow next() throws IOException {
        while (limit - pos > 0) {
            int at = pos;
            if (limit - at < 8) {
                throw malformed(at, "a truncated record (" + (limit - at) + " bytes left)");
            }
            int total = view.getInt(at);
            int magic = view.getInt(at + 4);
            if (magic != MESSAGE_MAGIC) {
                throw malformed(at, String.format("bad magic 0x%08X", magic));
            }
            if (total < MIN_RECORD_SIZE || total > limit - at) {
                throw malformed(at, "a record claiming " + total + " bytes, " + (limit - at) + " available");
            }
            pos = at + total;
            long queueOffset = view.getLong(at + QUEUE_OFFSET_POS);
            if (queueOffset >= first && queueOffset < end) {
                return row(at, total, queueOffset);
            }
        }
        return null;
    }

    private InternalRow row(int at, int total, long queueOffset) throws IOException {
        int recordEnd = at + total;
        int sysFlag = view.getInt(at + SYS_FLAG_POS);
        int p = at + BORN_HOST_POS + ((sysFlag & BORNHOST_V6) != 0 ? 20 : 8);
        long storeTimestamp = view.getLong(p);
        p += 8;
        int storeHostPos = p;
        int storeHostLength = ((sysFlag & STOREHOST_V6) != 0 ? 16 : 4) + 4;  // IP and port
        p += storeHostLength + 4 + 8;  // RECONSUMETIMES, PREPARED TRANSACTION OFFSET
        if (p + 4 > recordEnd) {
            throw malformed(at, "a record of " + total + " bytes, shorter than its fixed fields");
        }
        int bodyLength = view.getInt(p);
        p += 4;
        int bodyPos = p;
        if (bodyLength < 0 || bodyLength > recordEnd - bodyPos - 3) {
            throw malformed(at, "bad body length " + bodyLength);
        }
        p += bodyLength;
        int topicLength = buf[p] & 0xFF;
        int topicPos = p + 1;
        p = topicPos + topicLength;
        if (p + 2 > recordEnd) {
            throw malformed(at, "bad topic length " + topicLength);
        }
        int propertiesLength = view.getShort(p) & 0xFFFF;
        p += 2;
        if (p + propertiesLength != recordEnd) {
            throw malformed(at, "fields adding up to " + (p + propertiesLength - at) + " bytes, TOTALSIZE says " + total);
        }
        MessageProperties properties = new MessageProperties(buf, p, propertiesLength);
        UTF8String uniqKey = properties.get("UNIQ_KEY");
        byte[] body = Arrays.copyOfRange(buf, bodyPos, bodyPos + bodyLength);
        if (BodyInflater.isCompressed(sysFlag)) {
            body = BodyInflater.inflate(body, sysFlag, queueOffset);
        }
        return new GenericInternalRow(new Object[] {
            topic(topicPos, topicLength),
            brokerName,
            view.getInt(at + QUEUE_ID_POS),
            queueOffset,
            uniqKey != null ? uniqKey : OffsetMsgId.of(buf, storeHostPos, storeHostLength, at + PHYSICAL_OFFSET_POS),
            properties.get("KEYS"),
            properties.get("TAGS"),
            body,
            properties.toMapData(),
            view.getLong(at + BORN_TIMESTAMP_POS) * 1000,  // ms -> Spark's microseconds
            storeTimestamp * 1000,
        });
    }

    private UTF8String topic(int topicPos, int topicLength) {
        if (!Arrays.equals(buf, topicPos, topicPos + topicLength, topicBytes, 0, topicBytes.length)) {
            topicBytes = Arrays.copyOfRange(buf, topicPos, topicPos + topicLength);
            // through String: invalid UTF-8 becomes U+FFFD, as the record codec reads it
            topic = UTF8String.fromString(new String(topicBytes, StandardCharsets.UTF_8));
        }
        return topic;
    }

    private IOException malformed(int at, String what) {
        return new IOException("malformed records in a pull body of " + label + ": " + what + " at byte "
                + (at - start) + " of " + (limit - start));
    }
}
