package io.ferrymq.spark;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Messages the plan names that are gone: fail, or log and go on (failOnDataLoss=false), with
 * the text of the Python reader's {@code data_loss} so both readers fail alike.
 */
final class DataLoss {

    private static final Logger LOG = LoggerFactory.getLogger(DataLoss.class);

    static void report(boolean fail, String message) throws DataLossException {
        String hint = fail ? "set failOnDataLoss=false to skip the missing messages"
                : "skipping ahead (failOnDataLoss=false)";
        String text = "FerryMQ data loss: " + message + "; " + hint;
        if (fail) {
            throw new DataLossException(text);
        }
        LOG.warn(text);
    }

    private DataLoss() {
    }
}
