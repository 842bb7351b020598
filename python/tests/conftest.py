# pytest set-up for the meshlayout Python tests: 8 virtual CPU devices (the default, pinned so
# a developer's MESHLAYOUT_CPU_DEVICES does not change the meshes below). The module is found
# on PYTHONPATH: <build>/python in the build tree, or the installed site-packages directory.
import os

os.environ["MESHLAYOUT_CPU_DEVICES"] = "8"
