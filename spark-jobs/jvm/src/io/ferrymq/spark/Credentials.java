package io.ferrymq.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.Base64;
import java.util.SortedMap;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * An ACL account, and the request signature RocketMQ's AclClientRPCHook makes (as
 * ferrymq/acl/signature.py): the ext field values sorted by key, concatenated, HMAC-SHA1 with
 * the secret key, Base64.
 */
record Credentials(String accessKey, String secretKey, String securityToken) implements Serializable {

    private static final String HMAC = "HmacSHA1";

    /** Adds AccessKey (and SecurityToken) and the Signature over them and the other fields of a request without a body. */
    void sign(SortedMap<String, String> extFields) {
        extFields.put("AccessKey", accessKey);
        if (securityToken != null && !securityToken.isEmpty()) {
            extFields.put("SecurityToken", securityToken);
        }
        extFields.remove("Signature");
        StringBuilder content = new StringBuilder();
        extFields.values().forEach(content::append);
        try {
            Mac mac = Mac.getInstance(HMAC);
            mac.init(new SecretKeySpec(secretKey.getBytes(StandardCharsets.UTF_8), HMAC));
            byte[] digest = mac.doFinal(content.toString().getBytes(StandardCharsets.UTF_8));
            extFields.put("Signature", Base64.getEncoder().encodeToString(digest));
        } catch (GeneralSecurityException e) {  // HmacSHA1 is in every JRE
            throw new IllegalStateException("cannot sign a FerryMQ request: " + e, e);
        }
    }

    @Override
    public String toString() {  // the secret and the token never reach a log
        return "Credentials[accessKey=" + accessKey + "]";
    }
}
