import sys

from mlrunway.data.digits import write_digits

print(write_digits(sys.argv[1] if len(sys.argv) > 1 else "data/digits"))
