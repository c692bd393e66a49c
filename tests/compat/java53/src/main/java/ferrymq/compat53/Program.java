package ferrymq.compat53;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import com.alibaba.fastjson2.JSON;
import com.alibaba.fastjson2.JSONWriter;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/** What the 5.3.1 programs share: "--name value" arguments, JSON event lines on stdout, a first send, a hold. */
final class Program {

    private static final Object OUT_LOCK = new Object();

    interface Body {
        int run(Map<String, String> args) throws Exception;
    }

    private Program() {
    }

    /** Runs {@code body} on the defaults overridden by {@code argv}; exits with its code (1 and an error event if it threw). */
    static void main(String[] argv, Map<String, String> defaults, Body body) {
        Map<String, String> args = new LinkedHashMap<>(defaults);
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i], argv[i + 1]);
        }
        int rc;
        try {
            rc = body.run(args);
        } catch (Throwable t) {
            emit("event", "error", "error", String.valueOf(t));
            rc = 1;
        }
        System.exit(rc);
    }

    /** A send, retried while a new topic's route settles. */
    static SendResult sendOnceRouted(DefaultMQProducer p, Message m, long deadline) throws Exception {
        while (true) {
            try {
                return p.send(m);
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    /** Returns when stdin ends: the caller's signal (a closed pipe, or /dev/null at once). */
    static void holdUntilStdinEnds() throws IOException {
        while (System.in.read() >= 0) {
            continue;
        }
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** One JSON line from key/value pairs, written with fastjson2 (a RocketMQ 5.3.1 dependency). */
    static void emit(Object... kv) {
        Map<String, Object> event = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            event.put((String) kv[i], kv[i + 1]);
        }
        String line = JSON.toJSONString(event, JSONWriter.Feature.WriteNulls);
        synchronized (OUT_LOCK) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
