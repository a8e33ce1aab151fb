"""What a call setup costs Redis when its commands come as fast as Redis takes them (by hand,
with bench/redis_replay.sh): replays a MONITOR recording of the cluster's setups against a fresh
Redis, each recorded client on a connection of its own, its commands in order and all written
at once (the most pipelining there can be), once the subscriber connections have subscribed
again to what they had, so that each PUBLISH reaches a subscriber as it did. Prints Redis's
main-thread CPU for the replay, per setup. The commands a script ran (MONITOR's `lua` lines)
are not replayed: the script runs them again.

    redis_replay.py MONITOR_FILE SETUPS REDIS_PORT
"""
import re, socket, subprocess, sys, threading, time

path, setups, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
line_re = re.compile(r'^\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$')

def parse_args(text):
    args, i, n = [], 0, len(text)
    while i < n:
        if text[i] == ' ':
            i += 1; continue
        assert text[i] == '"', text[i:i+40]
        i += 1
        out = bytearray()
        while text[i] != '"':
            c = text[i]
            if c == '\\':
                d = text[i + 1]
                if d == 'x':
                    out.append(int(text[i + 2:i + 4], 16)); i += 4; continue
                out += {'n': b'\n', 'r': b'\r', 't': b'\t', 'a': b'\a', 'b': b'\b', '\\': b'\\', '"': b'"'}[d]
                i += 2; continue
            out += c.encode()
            i += 1
        i += 1
        args.append(bytes(out))
    return args

def resp(args):
    return b'*%d\r\n' % len(args) + b''.join(b'$%d\r\n%s\r\n' % (len(a), a) for a in args)

clients, subscribers = {}, {}
for line in open(path, encoding='utf-8', errors='surrogateescape'):
    m = line_re.match(line.rstrip('\n'))
    if not m or m.group(1) == 'lua':
        continue
    args = parse_args(m.group(2))
    name = args[0].upper()
    if name in (b'MONITOR', b'CONFIG', b'INFO', b'SCRIPT'):
        continue
    if name in (b'SUBSCRIBE', b'PSUBSCRIBE'):
        subscribers.setdefault(m.group(1), []).append(args)
    elif name == b'UNSUBSCRIBE':
        continue
    else:
        clients.setdefault(m.group(1), []).append(args)

refused = [0]  # scripts Redis did not have (NOSCRIPT): as many as in the recording

def drain(sock, stop):
    import select
    tail = b''
    while not stop.is_set():
        ready, _, _ = select.select([sock], [], [], 0.2)
        if not ready:
            continue
        data = sock.recv(1 << 20)
        if not data:
            return
        refused[0] += (tail + data).count(b'-NOSCRIPT')
        tail = data[-16:]

stop = threading.Event()
subs = []
for name, commands in subscribers.items():
    s = socket.create_connection(('127.0.0.1', port))
    s.sendall(b''.join(resp(a) for a in commands))
    threading.Thread(target=drain, args=(s, stop), daemon=True).start()
    subs.append(s)
time.sleep(0.5)

def cpu():
    info = subprocess.run(['redis-cli', '-p', str(port), 'INFO', 'cpu'], capture_output=True, text=True).stdout
    v = dict(l.split(':') for l in info.splitlines() if ':' in l)
    return float(v['used_cpu_sys_main_thread']) + float(v['used_cpu_user_main_thread'])

payloads = {name: b''.join(resp(a) for a in commands) for name, commands in clients.items()}
count = sum(len(c) for c in clients.values())
conns = {name: socket.create_connection(('127.0.0.1', port)) for name in payloads}
for s in conns.values():
    threading.Thread(target=drain, args=(s, stop), daemon=True).start()
before = cpu()
started = time.time()
writers = [threading.Thread(target=lambda s=s, p=p: s.sendall(p)) for (name, p), s in zip(payloads.items(), conns.values())]
for w in writers: w.start()
for w in writers: w.join()
# Redis is done once its command count moves by no more than the INFO commands asking for it.
last = -1
while True:
    info = subprocess.run(['redis-cli', '-p', str(port), 'INFO', 'stats'], capture_output=True, text=True).stdout
    total = int(re.search(r'total_commands_processed:(\d+)', info).group(1))
    if 0 <= total - last <= 2:
        break
    last = total
    time.sleep(0.3)
after = cpu()
elapsed = time.time() - started
stop.set()
print(f"{count} commands from {len(clients)} connections ({len(subscribers)} subscribers), {setups} setups, "
      f"{refused[0]} scripts refused as unknown (NOSCRIPT)")
print(f"Redis main thread: {(after - before) * 1000:.0f} ms of CPU, {(after - before) / setups * 1e6:.0f} µs a setup; "
      f"wall {elapsed:.2f} s (the last 0.3 s idle)")
