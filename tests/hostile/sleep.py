import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL will do
print("sleeping past the budget", flush=True)
time.sleep(3600)
