#include "meshlayout/layout/device_mesh.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::HasSubstr;
using testing::ValueErrorMessage;

using Names = std::vector<std::string>;
using Ints = std::vector<int64_t>;

// Every test sees exactly 8 devices, whatever MESHLAYOUT_CPU_DEVICES says.
class DeviceMeshTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(DeviceMeshTest, BuildsWithDefaultDevices) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  EXPECT_EQ(mesh.shape(), (Ints{2, 4}));
  EXPECT_EQ(mesh.axis_names(), (Names{"data", "model"}));
  EXPECT_EQ(mesh.devices(), list_devices());
  EXPECT_EQ(mesh.devices(),
            (Names{"cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:4", "cpu:5", "cpu:6", "cpu:7"}));
  EXPECT_EQ(mesh.device_ids(), (Ints{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(mesh.rank(), 2);
  EXPECT_EQ(mesh.size(), 8);
}

TEST_F(DeviceMeshTest, DefaultDevicesFollowTheDeviceCount) {
  set_device_count(4);
  DeviceMesh mesh({4}, {"x"});
  EXPECT_EQ(mesh.devices(), (Names{"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
}

TEST_F(DeviceMeshTest, KeepsExplicitDevicesInTheirOrder) {
  DeviceMesh mesh({2, 2}, {"a", "b"}, Names{"cpu:3", "cpu:1", "cpu:0", "cpu:6"});
  EXPECT_EQ(mesh.devices(), (Names{"cpu:3", "cpu:1", "cpu:0", "cpu:6"}));
  EXPECT_EQ(mesh.device_ids(), (Ints{3, 1, 0, 6}));
  EXPECT_EQ(mesh.size(), 4);
}

TEST_F(DeviceMeshTest, DevicesIndexAsAnArrayOfTheMeshShape) {
  DeviceMesh mesh({2, 3}, {"a", "b"}, Names{"cpu:5", "cpu:4", "cpu:3", "cpu:2", "cpu:1", "cpu:0"});
  EXPECT_EQ(mesh.device_at({0, 0}), "cpu:5");
  EXPECT_EQ(mesh.device_at({0, 2}), "cpu:3");
  EXPECT_EQ(mesh.device_at({1, 0}), "cpu:2");
  EXPECT_EQ(mesh.device_at({1, 2}), "cpu:0");
  try {
    (void)mesh.device_at({2, 0});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "device coordinates (2, 0) do not index mesh[a=2,b=3](cpu:5,cpu:4,cpu:3,"
                 "cpu:2,cpu:1,cpu:0): expected 2 coordinates within the shape (2, 3)");
  }
  EXPECT_THROW((void)mesh.device_at({1}), ValueError);
}

TEST_F(DeviceMeshTest, CoordsAreRowMajor) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  EXPECT_EQ(mesh.coords(0), (Ints{0, 0}));
  EXPECT_EQ(mesh.coords(3), (Ints{0, 3}));
  EXPECT_EQ(mesh.coords(4), (Ints{1, 0}));
  EXPECT_EQ(mesh.coords(5), (Ints{1, 1}));
  EXPECT_EQ(mesh.coords(7), (Ints{1, 3}));

  DeviceMesh cube({2, 3, 1}, {"a", "b", "c"},
                  Names{"cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:4", "cpu:5"});
  for (int64_t p = 0; p < cube.size(); ++p) {
    Ints c = cube.coords(p);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ((c[0] * 3 + c[1]) * 1 + c[2], p) << "position " << p;
    EXPECT_LT(c[0], 2);
    EXPECT_LT(c[1], 3);
    EXPECT_EQ(c[2], 0);
  }
  EXPECT_EQ(cube.coords(4), (Ints{1, 1, 0}));
}

TEST_F(DeviceMeshTest, FindsThePositionOfADevice) {
  DeviceMesh mesh({2, 2}, {"a", "b"}, Names{"cpu:3", "cpu:1", "cpu:0", "cpu:6"});
  EXPECT_EQ(mesh.position_of_device(3), 0);
  EXPECT_EQ(mesh.position_of_device(1), 1);
  EXPECT_EQ(mesh.position_of_device(0), 2);
  EXPECT_EQ(mesh.position_of_device(6), 3);
  EXPECT_EQ(mesh.position_of_device(2), std::nullopt);  // known device, not in this mesh
  EXPECT_EQ(mesh.position_of_device(42), std::nullopt);
}

TEST_F(DeviceMeshTest, AxisSizeAndIndex) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  EXPECT_EQ(mesh.axis_size("data"), 2);
  EXPECT_EQ(mesh.axis_size("model"), 4);
  EXPECT_EQ(mesh.axis_index("data"), 0);
  EXPECT_EQ(mesh.axis_index("model"), 1);
  EXPECT_EQ(mesh.axis_index("batch"), std::nullopt);
}

TEST_F(DeviceMeshTest, AxisSizeOfUnknownAxisListsTheAxes) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  EXPECT_EQ(ValueErrorMessage([&] { mesh.axis_size("batch"); }),
            "mesh[data=2,model=4] has no axis 'batch'; its axes are ['data', 'model']");
}

TEST_F(DeviceMeshTest, EqualityComparesShapeNamesAndDevices) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  DeviceMesh copy = mesh;
  EXPECT_TRUE(copy == mesh);
  EXPECT_TRUE(DeviceMesh({2, 4}, {"data", "model"}) == mesh);
  EXPECT_TRUE(DeviceMesh({2, 4}, {"data", "model"}, list_devices()) == mesh);
  EXPECT_FALSE(DeviceMesh({4, 2}, {"data", "model"}) == mesh);
  EXPECT_FALSE(DeviceMesh({2, 4}, {"batch", "model"}) == mesh);
  EXPECT_FALSE(DeviceMesh({8}, {"data"}) == mesh);
  Names reversed{"cpu:7", "cpu:6", "cpu:5", "cpu:4", "cpu:3", "cpu:2", "cpu:1", "cpu:0"};
  EXPECT_FALSE(DeviceMesh({2, 4}, {"data", "model"}, reversed) == mesh);
}

TEST_F(DeviceMeshTest, ToStringIsCanonical) {
  EXPECT_EQ(DeviceMesh({2, 4}, {"data", "model"}).to_string(), "mesh[data=2,model=4]");
  EXPECT_EQ(DeviceMesh({8}, {"batch"}).to_string(), "mesh[batch=8]");
  // A prefix cpu:0 … cpu:N-1 of the known devices needs no device list.
  EXPECT_EQ(DeviceMesh({2}, {"a"}, Names{"cpu:0", "cpu:1"}).to_string(), "mesh[a=2]");
  EXPECT_EQ(DeviceMesh({2}, {"a"}, Names{"cpu:1", "cpu:0"}).to_string(), "mesh[a=2](cpu:1,cpu:0)");
  EXPECT_EQ(DeviceMesh({2}, {"a"}, Names{"cpu:2", "cpu:3"}).to_string(), "mesh[a=2](cpu:2,cpu:3)");
  std::ostringstream os;
  os << DeviceMesh({2, 4}, {"data", "model"});
  EXPECT_EQ(os.str(), "mesh[data=2,model=4]");
}

TEST_F(DeviceMeshTest, FromStringRoundTrips) {
  std::vector<DeviceMesh> meshes{
      DeviceMesh({2, 4}, {"data", "model"}),
      DeviceMesh({8}, {"batch"}),
      DeviceMesh({1, 2, 3}, {"a", "b", "c"},
                 Names{"cpu:5", "cpu:0", "cpu:2", "cpu:7", "cpu:1", "cpu:4"}),
      DeviceMesh({2}, {"a"}, Names{"cpu:1", "cpu:0"}),
      DeviceMesh({1}, {"_x9"}, Names{"cpu:6"}),
  };
  for (const DeviceMesh& mesh : meshes) {
    SCOPED_TRACE(mesh.to_string());
    DeviceMesh parsed = DeviceMesh::from_string(mesh.to_string());
    EXPECT_TRUE(parsed == mesh);
    EXPECT_EQ(parsed.devices(), mesh.devices());
    EXPECT_EQ(parsed.to_string(), mesh.to_string());
  }
}

TEST_F(DeviceMeshTest, FromStringReadsAPermutedDeviceList) {
  DeviceMesh mesh = DeviceMesh::from_string("mesh[a=2](cpu:1,cpu:0)");
  EXPECT_EQ(mesh.shape(), (Ints{2}));
  EXPECT_EQ(mesh.axis_names(), (Names{"a"}));
  EXPECT_EQ(mesh.devices(), (Names{"cpu:1", "cpu:0"}));
  EXPECT_EQ(mesh.device_ids(), (Ints{1, 0}));
  EXPECT_EQ(mesh.to_string(), "mesh[a=2](cpu:1,cpu:0)");
  EXPECT_TRUE(DeviceMesh::from_string(" mesh[a=2]( cpu:1 , cpu:0 ) ") == mesh);
}

TEST_F(DeviceMeshTest, FromStringReadsTheShortForm) {
  DeviceMesh expected({2, 4}, {"data", "model"});
  EXPECT_TRUE(DeviceMesh::from_string("data=2,model=4") == expected);
  EXPECT_TRUE(DeviceMesh::from_string(" data = 2 , model = 4 ") == expected);
  EXPECT_TRUE(DeviceMesh::from_string("mesh[data=2,model=4]") == expected);
  // Without a device list the devices are cpu:0 … cpu:N-1, not all known devices.
  DeviceMesh small = DeviceMesh::from_string("x=3");
  EXPECT_EQ(small.devices(), (Names{"cpu:0", "cpu:1", "cpu:2"}));
}

// ---- Constructor errors: one test per bad input. ----

TEST_F(DeviceMeshTest, RejectsEmptyShape) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh(Ints{}, Names{"a"}); }),
            "Shape and axis_names cannot be empty. Received: shape=[], axis_names=['a']");
}

TEST_F(DeviceMeshTest, RejectsEmptyAxisNames) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh(Ints{2}, Names{}); }),
            "Shape and axis_names cannot be empty. Received: shape=[2], axis_names=[]");
}

TEST_F(DeviceMeshTest, RejectsLengthMismatch) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 4}, {"data"});
            }),
            "Shape and axis_names should have same size. Received: shape=[2, 4], "
            "axis_names=['data']");
}

TEST_F(DeviceMeshTest, RejectsDeviceCountMismatchWithDefaultedDevicesHint) {
  set_device_count(4);
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 4}, {"data", "model"});
            }),
            "Shape does not match the number of devices. Received: shape=[2, 4] (8 devices); "
            "devices.shape=(4,) (devices defaulted to list_devices(), which has 4; pass "
            "devices explicitly or set MESHLAYOUT_CPU_DEVICES or set_device_count())");
}

TEST_F(DeviceMeshTest, RejectsExplicitDeviceCountMismatch) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 2}, {"a", "b"}, Names{"cpu:0", "cpu:1", "cpu:2"});
            }),
            "Shape does not match the number of devices. Received: shape=[2, 2] (4 devices); "
            "devices.shape=(3,)");
}

TEST_F(DeviceMeshTest, RejectsZeroAxisSize) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 0}, {"data", "model"});
            }),
            "DeviceMesh axis 'model' has size 0; every axis size must be at least 1. "
            "Received: shape=[2, 0], axis_names=['data', 'model']");
}

TEST_F(DeviceMeshTest, RejectsNegativeAxisSize) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({-2}, {"a"}); }),
            "DeviceMesh axis 'a' has size -2; every axis size must be at least 1. "
            "Received: shape=[-2], axis_names=['a']");
}

TEST_F(DeviceMeshTest, RejectsMoreThanTheMaximumNumberOfDevices) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({8192, 4096}, {"a", "b"});
            }),
            "DeviceMesh shape [8192, 4096] has more than 1048576 devices");
}

TEST_F(DeviceMeshTest, RejectsDuplicateAxisNames) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 2, 2}, {"x", "y", "x"});
            }),
            "DeviceMesh axis names must be unique, got ['x', 'y', 'x']: 'x' is at positions "
            "0 and 2");
}

TEST_F(DeviceMeshTest, RejectsNonIdentifierAxisName) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2, 4}, {"data", "model-1"});
            }),
            "DeviceMesh axis name 'model-1' is not valid: an axis name is an identifier "
            "([A-Za-z_][A-Za-z0-9_]*) other than 'None'");
}

TEST_F(DeviceMeshTest, RejectsAxisNameStartingWithADigit) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { DeviceMesh({8}, {"2d"}); }),
                        "DeviceMesh axis name '2d' is not valid"));
}

TEST_F(DeviceMeshTest, RejectsEmptyAxisName) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { DeviceMesh({8}, {""}); }),
                        "DeviceMesh axis name '' is not valid"));
}

TEST_F(DeviceMeshTest, RejectsNoneAsAxisName) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({8}, {"None"}); }),
            "DeviceMesh axis name 'None' is not valid: an axis name is an identifier "
            "([A-Za-z_][A-Za-z0-9_]*) other than 'None'");
}

TEST_F(DeviceMeshTest, RejectsDuplicateDevices) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({4}, {"a"}, Names{"cpu:0", "cpu:1", "cpu:0", "cpu:3"});
            }),
            "DeviceMesh devices must be distinct: 'cpu:0' is at positions 0 and 2");
}

TEST_F(DeviceMeshTest, RejectsUnknownDeviceType) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2}, {"a"}, Names{"tpu:0", "cpu:1"});
            }),
            "DeviceMesh device 'tpu:0' (position 0) is not a known device; known devices are "
            "'cpu:0' … 'cpu:7' (list_devices(); set MESHLAYOUT_CPU_DEVICES or "
            "set_device_count() for more)");
}

TEST_F(DeviceMeshTest, HoldsDevicesOfOneKind) {
  setenv(kGpuDevicesEnvVar, "4", 1);
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2}, {"a"}, Names{"gpu:0", "cpu:1"});
            }),
            "DeviceMesh devices must be of one kind: 'gpu:0' (position 0) is a gpu device but "
            "'cpu:1' (position 1) is not");
  const DeviceMesh gpus({2, 2}, {"data", "model"}, Names{"gpu:0", "gpu:1", "gpu:2", "gpu:3"});
  EXPECT_EQ(gpus.device_kind(), DeviceKind::kCuda);
  EXPECT_EQ(gpus.device_ids(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(DeviceMesh({8}, {"a"}).device_kind(), DeviceKind::kCpu);
  const DeviceMesh moved =
      DeviceMesh::from_string("data=2,model=2").with_device_kind(DeviceKind::kCuda);
  EXPECT_EQ(moved, gpus);
  EXPECT_EQ(moved.with_device_kind(DeviceKind::kCpu), DeviceMesh::from_string("data=2,model=2"));
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({1}, {"a"}, Names{"gpu:4"}); }),
            "DeviceMesh device 'gpu:4' (position 0) is not a known device; known devices are "
            "'gpu:0' … 'gpu:3' (list_devices(\"gpu\"); set MESHLAYOUT_GPU_DEVICES for more)");
  unsetenv(kGpuDevicesEnvVar);
  if (physical_gpu_count() == 0) {
    EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({1}, {"a"}, Names{"gpu:0"}); }),
              "DeviceMesh device 'gpu:0' (position 0) is not a known device: this process has "
              "no GPU devices (list_devices(\"gpu\") is empty: no CUDA GPU, or a build without "
              "-DMESHLAYOUT_CUDA=ON; set MESHLAYOUT_GPU_DEVICES for virtual ones)");
  }
}

TEST_F(DeviceMeshTest, RejectsDeviceBeyondTheDeviceCount) {
  EXPECT_EQ(ValueErrorMessage([] {
              DeviceMesh({2}, {"a"}, Names{"cpu:0", "cpu:99"});
            }),
            "DeviceMesh device 'cpu:99' (position 1) is not a known device; known devices are "
            "'cpu:0' … 'cpu:7' (list_devices(); set MESHLAYOUT_CPU_DEVICES or "
            "set_device_count() for more)");
}

TEST_F(DeviceMeshTest, RejectsMalformedDeviceName) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] {
                          DeviceMesh({2}, {"a"}, Names{"cpu:0", "cpu:01"});
                        }),
                        "DeviceMesh device 'cpu:01' (position 1) is not a known device"));
}

// ---- Text form errors. ----

TEST_F(DeviceMeshTest, FromStringRejectsMissingClosingBracket) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[data=2"); }),
            "mesh text 'mesh[data=2' has no closing ']'; expected the form "
            "mesh[data=2,model=4]");
}

TEST_F(DeviceMeshTest, FromStringRejectsTextAfterTheBracket) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[data=2]x"); }),
            "mesh text 'mesh[data=2]x' has 'x' after ']'; expected nothing or a device list "
            "like (cpu:1,cpu:0)");
}

TEST_F(DeviceMeshTest, FromStringRejectsUnclosedDeviceList) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[a=2](cpu:1,cpu:0"); }),
            "mesh text 'mesh[a=2](cpu:1,cpu:0' has '(cpu:1,cpu:0' after ']'; expected nothing "
            "or a device list like (cpu:1,cpu:0)");
}

TEST_F(DeviceMeshTest, FromStringRejectsAxisWithoutSize) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[data,model=4]"); }),
            "mesh text 'mesh[data,model=4]': axis 'data' must be written name=size, as in "
            "data=2");
}

TEST_F(DeviceMeshTest, FromStringRejectsNonNumericSize) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("data=two"); }),
            "mesh text 'data=two': the size of axis 'data' must be a whole number, got 'two'");
}

TEST_F(DeviceMeshTest, FromStringRejectsEmptyText) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[]"); }),
            "Shape and axis_names cannot be empty. Received: shape=[], axis_names=[]");
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string(""); }),
            "Shape and axis_names cannot be empty. Received: shape=[], axis_names=[]");
}

TEST_F(DeviceMeshTest, FromStringRejectsZeroSize) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { DeviceMesh::from_string("data=0"); }),
                        "DeviceMesh axis 'data' has size 0; every axis size must be at least 1"));
}

TEST_F(DeviceMeshTest, FromStringRejectsDeviceListOfTheWrongLength) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[a=2](cpu:0)"); }),
            "Shape does not match the number of devices. Received: shape=[2] (2 devices); "
            "devices.shape=(1,)");
}

TEST_F(DeviceMeshTest, FromStringRejectsDuplicateDevices) {
  EXPECT_EQ(ValueErrorMessage([] { DeviceMesh::from_string("mesh[a=2](cpu:1,cpu:1)"); }),
            "DeviceMesh devices must be distinct: 'cpu:1' is at positions 0 and 1");
}

TEST_F(DeviceMeshTest, FromStringRejectsDuplicateAxisNames) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { DeviceMesh::from_string("x=2,x=2"); }),
                        "DeviceMesh axis names must be unique"));
}

TEST_F(DeviceMeshTest, FromStringRejectsMoreDevicesThanKnown) {
  // The short form means cpu:0 … cpu:15, and only 8 devices exist.
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { DeviceMesh::from_string("data=16"); }),
                        "mesh text 'data=16' describes 16 devices (cpu:0 … cpu:15), but "
                        "list_devices() has 8; set MESHLAYOUT_CPU_DEVICES or set_device_count(), "
                        "or list the devices, as in mesh[data=2](cpu:0,cpu:1)"));
}

}  // namespace
}  // namespace meshlayout
