#!/bin/bash
# ferrynet: the pod network of the offline kind nodes (kindnetd is on no registry reachable here).
# A DaemonSet (manifests/default-cni.yaml: host network, its own ServiceAccount allowed to list
# Nodes; the kubelet's credentials may read only their own Node). Every 5 s it reads the Node
# objects and makes this node agree with them:
#   - /etc/cni/net.d/10-ferrynet.conflist: ptp + host-local over this node's spec.podCIDR, portmap;
#   - a route to every other node's podCIDR via that node's InternalIP;
#   - pod traffic leaving the pod network is masqueraded (chain FERRYNET-MASQ).
# It logs only when something changes.
set -u
SA=/var/run/secrets/kubernetes.io/serviceaccount
API="https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}"
CONF=/etc/cni/net.d/10-ferrynet.conflist
ME="${NODE_NAME:?NODE_NAME (spec.nodeName from the downward API) is required}"

conflist() {
  cat <<JSON
{"cniVersion": "0.4.0", "name": "ferrynet", "plugins": [
  {"type": "ptp", "ipMasq": false, "mtu": 1500,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$1"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
}

sync_once() {
  local nodes mine cidrs
  nodes="$(curl -sf --max-time 10 --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat "$SA/token")" \
            "$API/api/v1/nodes")" || { echo "ferrynet: cannot list nodes (will retry)"; return 0; }
  mine="$(jq -r --arg me "$ME" '.items[] | select(.metadata.name == $me) | .spec.podCIDR // empty' <<<"$nodes")"
  [ -n "$mine" ] || return 0
  if [ "$(conflist "$mine")" != "$(cat "$CONF" 2>/dev/null)" ]; then
    mkdir -p /etc/cni/net.d
    conflist "$mine" > "$CONF.tmp" && mv "$CONF.tmp" "$CONF"
    echo "ferrynet: pod CIDR $mine"
  fi
  while read -r name cidr ip; do
    [ "$name" = "$ME" ] && continue
    if ! ip route show "$cidr" | grep -q "via $ip "; then
      ip route replace "$cidr" via "$ip" && echo "ferrynet: route $cidr via $ip ($name)"
    fi
  done < <(jq -r '.items[] | select(.spec.podCIDR != null) | [.metadata.name, .spec.podCIDR,
           (.status.addresses[] | select(.type == "InternalIP") | .address)] | @tsv' <<<"$nodes" | grep -v ':')
  cidrs="$(jq -r '.items[].spec.podCIDR // empty' <<<"$nodes" | sort)"
  if [ "$cidrs" != "${LAST_CIDRS:-}" ]; then
    iptables -t nat -N FERRYNET-MASQ 2>/dev/null || true
    iptables -t nat -F FERRYNET-MASQ
    for c in $cidrs; do iptables -t nat -A FERRYNET-MASQ -d "$c" -j RETURN; done
    iptables -t nat -A FERRYNET-MASQ -j MASQUERADE
    iptables -t nat -C POSTROUTING -s "$mine" -j FERRYNET-MASQ 2>/dev/null \
      || iptables -t nat -A POSTROUTING -s "$mine" -j FERRYNET-MASQ
    LAST_CIDRS="$cidrs"
    echo "ferrynet: masquerading pod traffic leaving $(echo $cidrs)"
  fi
}

echo "ferrynet: node $ME"
while true; do
  sync_once
  sleep 5
done
