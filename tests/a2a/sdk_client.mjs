// Drive MAESTRO with the official A2A JavaScript SDK (@a2a-js/sdk, pinned by scripts/test):
// discover the card, a streaming send to completion, and a cancel of a running task. Prints
// one line per check; exits non-zero on the first failure.
//
// usage: node sdk_client.mjs BASE_URL TOKEN BINDING   (BINDING: JSONRPC or HTTP+JSON)
import { randomUUID } from 'node:crypto';
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, RestTransportFactory } from '@a2a-js/sdk/client';
import { Role, taskStateToJSON } from '@a2a-js/sdk';

const [base, token, binding] = process.argv.slice(2);
const check = (condition, what) => {
  if (!condition) { console.log(`FAILED: ${what}`); process.exit(1); }
  console.log(`ok: ${what}`);
};
const fetchImpl = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(url, { ...init, headers });
};
const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
  transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
  preferredTransports: [binding],
}));
const client = await factory.createFromUrl(base);
const message = (text) => ({
  messageId: randomUUID(), role: Role.ROLE_USER, contextId: '', taskId: '', metadata: undefined,
  extensions: [], referenceTaskIds: [],
  parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
});

const kinds = [];
let state;
for await (const ev of client.sendMessageStream({ tenant: '', message: message('finish now'), configuration: undefined, metadata: undefined })) {
  kinds.push(ev.payload?.$case);
  // The task may be over before the stream opens: its snapshot then says so.
  if (ev.payload?.$case === 'task') state = taskStateToJSON(ev.payload.value.status.state);
  if (ev.payload?.$case === 'statusUpdate') state = taskStateToJSON(ev.payload.value.status.state);
}
check(kinds[0] === 'task', `a streamed task: ${kinds.slice(0, 4).join(',')}...`);
check(state === 'TASK_STATE_COMPLETED', 'the stream ends completed');

const sent = await client.sendMessage({
  tenant: '', message: message('slow work'), metadata: undefined,
  configuration: { acceptedOutputModes: [], returnImmediately: true, historyLength: undefined, taskPushNotificationConfig: undefined },
});
const canceled = await client.cancelTask({ tenant: '', id: sent.id, metadata: undefined });
check(taskStateToJSON(canceled.status.state) === 'TASK_STATE_CANCELED', 'a running task is canceled');
