package io.ferrymq.spark;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * One blocking connection to one broker, speaking RocketMQ remoting frames with JSON headers
 * (docs/wire-format.md#remoting-frame): {@code length:i32 | serType:u8 headerLength:u24 | header | body}.
 * Several requests may be in flight; {@link #receive()} returns responses as they come, and the
 * caller matches them by opaque.
 */
final class RemotingClient implements Closeable {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int SERIALIZE_JSON = 0;
    private static final int FLAG_RESPONSE = 1;
    private static final int VERSION = 407;  // V4_9_7, as the Python client sends
    private static final int MAX_FRAME = 16 * 1024 * 1024;  // RocketMQ's frame limit, the broker's too

    private final String addr;
    private final int timeoutMillis;
    private final Credentials credentials;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private int nextOpaque;

    private RemotingClient(String addr, int timeoutMillis, Credentials credentials, Socket socket) throws IOException {
        this.addr = addr;
        this.timeoutMillis = timeoutMillis;
        this.credentials = credentials;
        this.socket = socket;
        this.in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 256 * 1024));
        this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 8 * 1024));
    }

    /** Connects to {@code host:port}; an IOException naming the broker when it cannot. */
    static RemotingClient connect(String addr, int timeoutMillis, Credentials credentials) throws IOException {
        int colon = addr.lastIndexOf(':');
        if (colon <= 0 || colon == addr.length() - 1) {
            throw new IOException("FerryMQ broker address " + addr + " is not host:port");
        }
        String host = addr.substring(0, colon).replace("[", "").replace("]", "");
        int port;
        try {
            port = Integer.parseInt(addr.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IOException("FerryMQ broker address " + addr + " is not host:port", e);
        }
        Socket socket = new Socket();
        try {
            socket.setTcpNoDelay(true);
            socket.connect(new InetSocketAddress(host, port), timeoutMillis);
            socket.setSoTimeout(timeoutMillis);
            return new RemotingClient(addr, timeoutMillis, credentials, socket);
        } catch (IOException e) {
            socket.close();
            throw new IOException("cannot connect to FerryMQ broker " + addr + ": " + e.getMessage(), e);
        }
    }

    String addr() {
        return addr;
    }

    /** Sends a request without a body (signed when there are credentials); returns its opaque. */
    int send(int code, Map<String, String> fields) throws IOException {
        int opaque = nextOpaque++;
        TreeMap<String, String> extFields = new TreeMap<>(fields);
        if (credentials != null) {
            credentials.sign(extFields);
        }
        ObjectNode header = JSON.createObjectNode();
        header.put("code", code);
        header.set("extFields", JSON.valueToTree(extFields));
        header.put("flag", 0);
        header.put("language", "JAVA");
        header.put("opaque", opaque);
        header.put("serializeTypeCurrentRPC", "JSON");
        header.put("version", VERSION);
        byte[] headerBytes = JSON.writeValueAsBytes(header);
        try {
            out.writeInt(4 + headerBytes.length);
            out.writeInt(SERIALIZE_JSON << 24 | headerBytes.length);
            out.write(headerBytes);
            out.flush();
        } catch (IOException e) {
            throw new IOException("cannot send to FerryMQ broker " + addr + ": " + e.getMessage(), e);
        }
        return opaque;
    }

    /** The next response from the broker, whichever request it answers. */
    RemotingResponse receive() throws IOException {
        while (true) {
            byte[] frame = readFrame();
            int word = (frame[0] & 0xFF) << 24 | (frame[1] & 0xFF) << 16 | (frame[2] & 0xFF) << 8 | (frame[3] & 0xFF);
            int serializeType = word >>> 24;
            int headerLength = word & 0xFFFFFF;
            if (serializeType != SERIALIZE_JSON) {
                throw new IOException("FerryMQ broker " + addr + " answered with header serialization " + serializeType
                        + "; this reader sends and reads JSON headers only");
            }
            if (headerLength > frame.length - 4) {
                throw new IOException("FerryMQ broker " + addr + " sent a frame whose header length " + headerLength
                        + " exceeds the frame (" + frame.length + " bytes)");
            }
            JsonNode header = JSON.readTree(frame, 4, headerLength);
            if ((header.path("flag").asInt() & FLAG_RESPONSE) == 0) {
                continue;  // a request from the broker (client notifications): not for a reader that never registers
            }
            JsonNode remark = header.get("remark");
            return new RemotingResponse(header.path("code").asInt(), header.path("opaque").asInt(),
                    remark == null || remark.isNull() ? null : remark.asText(), extFields(header), frame,
                    4 + headerLength, frame.length - 4 - headerLength);
        }
    }

    private byte[] readFrame() throws IOException {
        try {
            int length = in.readInt();
            if (length < 4 || length > MAX_FRAME) {
                throw new IOException("FerryMQ broker " + addr + " sent a frame of " + length + " bytes (limit "
                        + MAX_FRAME + ")");
            }
            byte[] frame = new byte[length];
            in.readFully(frame);
            return frame;
        } catch (SocketTimeoutException e) {
            throw new IOException("FerryMQ broker " + addr + " did not answer within " + timeoutMillis + " ms", e);
        } catch (EOFException e) {
            throw new IOException("FerryMQ broker " + addr + " closed the connection", e);
        }
    }

    private static Map<String, String> extFields(JsonNode header) {
        Map<String, String> fields = new HashMap<>();
        JsonNode ext = header.get("extFields");
        if (ext != null && ext.isObject()) {
            for (Map.Entry<String, JsonNode> field : ext.properties()) {
                fields.put(field.getKey(), field.getValue().asText());
            }
        }
        return fields;
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
