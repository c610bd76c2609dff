"""compare.py with steprates._TIMED_STEPS set to argv[1] (an experiment, not the branch's method)"""
import sys
n = int(sys.argv.pop(1))
from sparcapps.deep import steprates
steprates._TIMED_STEPS = n
sys.argv[0] = "compare.py"
exec(open("/tmp/cal/compare.py").read())
