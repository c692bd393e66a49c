package ferrymq.compat;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * The official mqadmin ({@link MQAdminStartup}), minus the JVM's exit delay: after the
 * sub-command has shut its admin client down, Netty's graceful shutdown (2 s quiet period)
 * keeps non-daemon threads alive for ~3 s. Run the command, flush, halt.
 *
 * <p>Usage is exactly mqadmin's: {@code java ferrymq.compat.MQAdmin clusterList -n HOST:PORT}.
 * Like mqadmin, a failing sub-command prints its exception to stderr and still exits 0.
 */
public final class MQAdmin {
    public static void main(String[] args) {
        int rc = 0;
        try {
            MQAdminStartup.main0(args, null);
        } catch (Throwable t) {
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    private MQAdmin() {
    }
}
