package ferrymq.compat;

import java.io.*;
import java.util.*;
import org.apache.rocketmq.filter.FilterFactory;
import org.apache.rocketmq.filter.expression.*;

/**
 * RocketMQ 4.9.7's own SQL92 filter as a reference: reads "expression TAB name TAB value ..." lines on
 * stdin and prints, per line, COMPILE_ERROR, EVAL_ERROR, NULL, true or false (what the broker's
 * ExpressionMessageFilter computes before it decides "match only on true").
 */
public final class SqlCheck {
    public static void main(String[] a) throws Exception {
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = r.readLine()) != null) {
            String[] parts = line.split("\t", -1);
            String expr = parts[0];
            Map<String, String> props = new HashMap<>();
            for (int i = 1; i + 1 < parts.length; i += 2) props.put(parts[i], parts[i + 1]);
            Expression e;
            try {
                e = FilterFactory.INSTANCE.get("SQL92").compile(expr);
            } catch (Throwable t) {
                System.out.println("COMPILE_ERROR");
                continue;
            }
            try {
                final Map<String, String> p = props;
                Object v = e.evaluate(new EvaluationContext() {
                    public Object get(String name) { return p.get(name); }
                    public Map<String, Object> keyValues() { return new HashMap<>(p); }
                });
                System.out.println(v == null ? "NULL" : v.toString());
            } catch (Throwable t) {
                System.out.println("EVAL_ERROR");
            }
        }
    }
}
