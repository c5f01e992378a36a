package bundle

// The handler shims run a handler "module.function" the way AWS Lambda does, so that a bundle
// written for it runs unchanged. The child reads the task's payload, a JSON object, on stdin;
// the shim imports the module from the bundle and calls function(event, context): event is the
// whole payload, context has the request id (task_id:attempt), the function name (the task's
// name) and the time left (until lease_expires_at when the payload has it, else a large number).
// The handler's return value is printed to stdout as one JSON line (null for None or undefined),
// and nothing the handler prints comes after it: stdout is pointed at stderr once it is written,
// and the process exits at once. A handler that raises or rejects has its traceback or stack
// printed to stderr, and the process exits with status 1.

// pythonShim is run as python3 -c pythonShim BUNDLE_ROOT DOTTED_MODULE FUNCTION. The bundle's
// root goes first on sys.path and the module is imported by its dotted name, as Lambda does, so
// that a handler in a folder can import its siblings as a package's. A coroutine (async def
// handler) is run to its end.
const pythonShim = `
import calendar, importlib, inspect, json, os, re, sys, time, traceback

_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")


def _epoch(s):
    m = _RFC3339.match(s) if isinstance(s, str) else None
    if m is None:
        return None
    t = calendar.timegm(tuple(int(g) for g in m.groups()[:6]))
    if m.group(7):
        t += float(m.group(7))
    z = m.group(8)
    if z not in ("Z", "z"):
        off = int(z[1:3]) * 3600 + int(z[4:6]) * 60
        t -= off if z[0] == "+" else -off
    return t


class Context(object):
    function_version = "$LATEST"
    invoked_function_arn = ""
    memory_limit_in_mb = ""
    log_group_name = ""
    log_stream_name = ""
    identity = None
    client_context = None

    def __init__(self, payload):
        self.aws_request_id = "%s:%s" % (payload.get("task_id", ""), payload.get("attempt", ""))
        self.function_name = payload.get("name")
        self._deadline = _epoch(payload.get("lease_expires_at"))

    def get_remaining_time_in_millis(self):
        if self._deadline is None:
            return 2147483647
        return max(0, int((self._deadline - time.time()) * 1000))


async def _await(a):
    return await a


def _flush():
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            s.flush()
        except Exception:
            pass


def _main():
    root, module, function = sys.argv[1:4]
    raw = sys.stdin.buffer.read()
    event = json.loads(raw) if raw.strip() else {}
    payload = event if isinstance(event, dict) else {}
    if sys.path and sys.path[0] == "":
        del sys.path[0]  # the working directory is the task's, not the bundle
    sys.path.insert(0, root)
    sys.argv = [os.path.join(root, *module.split(".")) + ".py"]
    handler = getattr(importlib.import_module(module), function)
    result = handler(event, Context(payload))
    if inspect.isawaitable(result):
        import asyncio
        result = asyncio.run(_await(result))
    line = (json.dumps(result, default=str) + "\n").encode()
    _flush()
    while line:
        line = line[os.write(1, line):]
    os.dup2(2, 1)


try:
    _main()
except Exception:
    traceback.print_exc()
    _flush()
    os._exit(1)
_flush()
os._exit(0)
`

// nodeShim is run as node -e nodeShim MODULE_FILE FUNCTION. The module is loaded with import(),
// so ES modules and CommonJS alike work; a handler that returns a promise is awaited, and one
// that takes three parameters is handed a callback(error, result) as well.
const nodeShim = `
'use strict';
const { pathToFileURL } = require('node:url');
const [file, name] = process.argv.slice(1);

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const raw = Buffer.concat(chunks).toString('utf8');
  const event = raw.trim() === '' ? {} : JSON.parse(raw);
  const payload = event !== null && typeof event === 'object' && !Array.isArray(event) ? event : {};
  const mod = await import(pathToFileURL(file).href);
  let handler = mod[name];
  if (typeof handler !== 'function' && mod.default != null) handler = mod.default[name];
  if (typeof handler !== 'function') throw new Error(file + ' exports no function ' + name);
  const end = typeof payload.lease_expires_at === 'string' ? Date.parse(payload.lease_expires_at) : NaN;
  const context = {
    awsRequestId: String(payload.task_id ?? '') + ':' + String(payload.attempt ?? ''),
    functionName: payload.name,
    functionVersion: '$LATEST',
    invokedFunctionArn: '',
    memoryLimitInMB: '',
    logGroupName: '',
    logStreamName: '',
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => (Number.isNaN(end) ? 2147483647 : Math.max(0, end - Date.now())),
  };
  let result;
  if (handler.length >= 3) {
    result = await new Promise((resolve, reject) => {
      const r = handler(event, context, (err, res) => (err != null ? reject(err) : resolve(res)));
      if (r != null && typeof r.then === 'function') r.then(resolve, reject);
    });
  } else {
    result = await handler(event, context);
  }
  const line = JSON.stringify(result === undefined ? null : result);
  return (line === undefined ? 'null' : line) + '\n';
}

main().then((line) => {
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = process.stderr.write.bind(process.stderr);
  write(line, () => process.exit(0));
}, (err) => {
  const text = err instanceof Error && err.stack ? err.stack : 'Error: ' + String(err);
  process.stderr.write(text + '\n', () => process.exit(1));
});
`
