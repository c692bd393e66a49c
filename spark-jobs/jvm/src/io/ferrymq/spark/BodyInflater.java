package io.ferrymq.spark;

import java.io.ByteArrayOutputStream;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Bodies as the producer wrote them (ferrymq.common.message.inflate_body): a COMPRESSED record's
 * body is a zlib stream (compression type bits 0 or ZLIB). One that cannot be inflated is kept
 * as stored, with an error logged, as the Python reader and the pull consumer do.
 */
final class BodyInflater {

    private static final Logger LOG = LoggerFactory.getLogger(BodyInflater.class);
    private static final int COMPRESSED = 0x1;
    private static final int COMPRESSION_TYPE_MASK = 0x700;
    private static final int COMPRESSION_ZLIB = 0x300;

    static boolean isCompressed(int sysFlag) {
        return (sysFlag & COMPRESSED) != 0;
    }

    /** The inflated body of a compressed record (see {@link #isCompressed}). */
    static byte[] inflate(byte[] stored, int sysFlag, long queueOffset) {
        int kind = sysFlag & COMPRESSION_TYPE_MASK;
        if (kind != 0 && kind != COMPRESSION_ZLIB) {
            LOG.error("message at queue offset {}: unsupported compression type 0x{} (only ZLIB is available); "
                    + "read as stored", queueOffset, Integer.toHexString(kind).toUpperCase());
            return stored;
        }
        Inflater inflater = new Inflater();
        try {
            inflater.setInput(stored);
            ByteArrayOutputStream out = new ByteArrayOutputStream(Math.max(64, stored.length * 4));
            byte[] buffer = new byte[64 * 1024];
            while (!inflater.finished()) {
                int n = inflater.inflate(buffer);
                if (n == 0 && (inflater.needsInput() || inflater.needsDictionary())) {
                    throw new DataFormatException("incomplete or truncated stream");
                }
                out.write(buffer, 0, n);
            }
            return out.toByteArray();
        } catch (DataFormatException e) {
            LOG.error("message at queue offset {}: compressed body cannot be inflated: {}; read as stored",
                    queueOffset, e.getMessage());
            return stored;
        } finally {
            inflater.end();
        }
    }

    private BodyInflater() {
    }
}
