package ferrymq.chaos;

import java.io.BufferedWriter;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A JSON-lines history file (e2e/chaos/history.py reads it): one object per line, each line
 * flushed as written, so a killed process leaves at most its last line cut short.
 */
final class Jsonl implements AutoCloseable {

    private final Writer out;
    private final boolean toStdout;
    private boolean closed;

    Jsonl(String path) throws IOException {
        toStdout = "-".equals(path);
        out = toStdout
            ? new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8))
            : new BufferedWriter(new OutputStreamWriter(new FileOutputStream(path, true), StandardCharsets.UTF_8));
    }

    /** Whether the history goes to stdout (then progress goes to stderr). */
    boolean onStdout() {
        return toStdout;
    }

    synchronized void write(Map<String, Object> obj) {
        if (closed) {
            return;
        }
        StringBuilder sb = new StringBuilder(256);
        json(sb, obj);
        sb.append('\n');
        try {
            out.write(sb.toString());
            out.flush();
        } catch (IOException e) {
            System.err.println("history write failed: " + e);
        }
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            out.flush();
            if (!toStdout) {
                out.close();
            }
        } catch (IOException e) {
            System.err.println("history close failed: " + e);
        }
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    /** A progress or event line for whoever watches the process (stdout, or stderr). */
    static void say(boolean toStderr, Map<String, Object> obj) {
        StringBuilder sb = new StringBuilder(128);
        json(sb, obj);
        if (toStderr) {
            System.err.println(sb);
            System.err.flush();
        } else {
            synchronized (System.out) {
                System.out.println(sb);
                System.out.flush();
            }
        }
    }

    /** The first 16 hex digits of the SHA-256 of a body: what the checker compares. */
    static String digest(byte[] body) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(body);
            StringBuilder sb = new StringBuilder(16);
            for (int i = 0; i < 8; i++) {
                sb.append(String.format("%02x", d[i] & 0xff));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    static String firstLine(Throwable t) {
        String s = t.getClass().getSimpleName() + ": " + t.getMessage();
        int nl = s.indexOf('\n');
        s = nl >= 0 ? s.substring(0, nl) : s;
        return s.length() > 300 ? s.substring(0, 300) : s;
    }

    static Map<String, String> args(String[] argv, String... allowed) {
        Map<String, String> m = new LinkedHashMap<>();
        java.util.Set<String> ok = new java.util.HashSet<>(java.util.Arrays.asList(allowed));
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || !ok.contains(argv[i].substring(2)) || i + 1 >= argv.length) {
                throw new IllegalArgumentException("unknown or incomplete option " + argv[i] + "; options: " + ok);
            }
            m.put(argv[i].substring(2), argv[i + 1]);
        }
        return m;
    }

    private static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else {
            String s = v.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}
