"""Python 3.11's `ast.parse` fails when two threads parse at once (agent/__init__.py): with
Nightshift imported, threads that parse while the collector runs their finalizers never fail."""
import subprocess
import sys

import pytest

CHURN = r'''
import ast, inspect, sys, threading
import agent
source = open(inspect.getsourcefile(__import__("typing"))).read()
errors = []

class Finalized:            # a cycle whose collection runs Python code inside a parse
    def __del__(self):
        sum(range(50))

def churn():
    for _ in range(60):
        a, b = Finalized(), Finalized()
        a.b, b.a = b, a
        try:
            ast.parse(source)
            ast.literal_eval("{'lr': 3e-4, 'layers': [1, 2]}")
        except SystemError as error:
            errors.append(str(error))
            return

threads = [threading.Thread(target=churn) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(errors)
'''


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="only Python 3.11's ast.parse shares its counter")
def test_threads_parsing_at_once_never_fail():
    # Without the lock this fails in every run here (two of the three threads, within 50 parses).
    done = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_the_lock_keeps_what_ast_parse_returns():
    import ast

    import agent  # noqa: F401

    assert ast.dump(ast.parse("LR = 3e-4")) == ast.dump(compile("LR = 3e-4", "<s>", "exec", ast.PyCF_ONLY_AST))
    assert ast.literal_eval("[1, 2]") == [1, 2] and ast.parse.__name__ == "parse"
