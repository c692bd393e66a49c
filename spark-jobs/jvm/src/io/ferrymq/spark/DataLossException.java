package io.ferrymq.spark;

import java.io.IOException;

/** A read met missing messages with failOnDataLoss=true; the message starts "FerryMQ data loss:". */
final class DataLossException extends IOException {

    private static final long serialVersionUID = 1L;

    DataLossException(String message) {
        super(message);
    }
}
