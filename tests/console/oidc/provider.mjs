// An OpenID Connect provider for the console's sign-in tests: panva/oidc-provider (a certified
// implementation) on 127.0.0.1 with one confidential client, PKCE required, and its development
// login and consent pages (any password signs in; the login name is the account). Each account's
// groups come from GROUPS below, served in the ID token's claims or by the userinfo endpoint.
//
//   node provider.mjs PORT REDIRECT_URI CLIENT_SECRET
//
// Prints {"event": "ready", "issuer": ...} once it listens.
import Provider from "oidc-provider";

const [port, redirectUri, clientSecret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const GROUPS = {
  "ada": ["mq-admins"],
  "olga": ["mq-operators", "payments"],
  "vic": ["mq-viewers"],
  "nora": ["marketing"],  // in no group the console maps: no role
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: "ferrymq-console",
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
  }],
  pkce: { required: () => true },
  scopes: ["openid", "profile", "groups"],
  claims: { openid: ["sub"], profile: ["preferred_username", "name"], groups: ["groups"] },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() { return { sub: id, preferred_username: id, name: id, groups: GROUPS[id] ?? [] }; },
    };
  },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["ferrymq-test-only"] },
  ttl: { AccessToken: 600, IdToken: 600, Session: 3600, Interaction: 600, Grant: 3600, AuthorizationCode: 60 },
});
provider.proxy = false;
const server = provider.listen(Number(port), "127.0.0.1", () => {
  console.log(JSON.stringify({ event: "ready", issuer }));
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
