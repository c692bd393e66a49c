// The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, gRPC) as a scriptable peer
// for tests/compat (run by grpc_harness.run_grpc_node). One JSON event per line on stdout:
//   produce endpoints=H:P topic=T count=N [kind=normal|fifo|delay] [delayMs=D] [prefix=P]
//   simple  endpoints=H:P topic=T group=G expect=N [invisibleMs=I] [ack=true|false] [timeoutMs=X]
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const [ mode, ...rest ] = process.argv.slice(2);
const a = Object.fromEntries(rest.map(s => [ s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1) ]));
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const event = (name, fields) => process.stdout.write(JSON.stringify({ event: name, ...fields }) + '\n');
const common = () => {
  const o = { endpoints: a.endpoints, logger: quiet, sslEnabled: a.ssl === 'true' };
  if (a.ak) o.sessionCredentials = { accessKey: a.ak, accessSecret: a.sk };
  return o;
};

async function produce() {
  const producer = new Producer({ ...common(), topics: [ a.topic ] });
  await producer.startup();
  let failed = 0;
  const count = Number(a.count);
  for (let i = 0; i < count; i++) {
    const key = (a.prefix || 'n') + i;
    const msg = { topic: a.topic, tag: 'TagA', keys: [ key ], body: Buffer.from('body-' + key),
      properties: new Map([[ 'seq', String(i) ]]) };
    if (a.kind === 'fifo') msg.messageGroup = 'g' + (i % 3);
    if (a.kind === 'delay') msg.delay = Number(a.delayMs || 1000);
    try {
      const r = await producer.send(msg);
      event('sent', { key, id: r.messageId, group: msg.messageGroup || '', at: Date.now() });
    } catch (e) {
      failed++;
      event('send_failed', { key, error: String(e) });
    }
  }
  await producer.shutdown();
  event('done', { sent: count - failed, failed });
  return failed === 0 ? 0 : 1;
}

async function simple() {
  const consumer = new SimpleConsumer({ ...common(), consumerGroup: a.group,
    subscriptions: new Map([[ a.topic, a.tags || '*' ]]), awaitDuration: Number(a.awaitMs || 5000) });
  await consumer.startup();
  const expect = Number(a.expect);
  const deadline = Date.now() + Number(a.timeoutMs || 60000);
  let got = 0;
  while (got < expect && Date.now() < deadline) {
    let views = [];
    try {
      views = await consumer.receive(16, Number(a.invisibleMs || 15000));
    } catch (e) {
      event('receive_failed', { error: String(e) });
      await new Promise(r => setTimeout(r, 200));
      continue;
    }
    for (const mv of views) {
      got++;
      event('received', { via: 'node-simple', key: mv.keys.join(','), id: mv.messageId, attempt: mv.deliveryAttempt,
        group: mv.messageGroup || '', tag: mv.tag || '', seq: mv.properties.get('seq') || '',
        body: mv.body.toString(), corrupted: mv.corrupted, at: Date.now() });
      if (a.ack !== 'false') await consumer.ack(mv);
    }
  }
  await consumer.shutdown();
  event('done', { received: got });
  return got >= expect ? 0 : 1;
}

const modes = { produce, simple };
if (!modes[mode]) {
  process.stderr.write('unknown mode ' + mode + '\n');
  process.exit(2);
}
modes[mode]().then(code => process.exit(code), e => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(3); });
