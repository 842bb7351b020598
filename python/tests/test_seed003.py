# Seed 003 (keras.distribution.LayoutMap docstring), written exactly as the seed writes it,
# then its `==` comments checked. As in Keras, a lookup returns the stored TensorLayout object.
from meshlayout import DeviceMesh, LayoutMap, TensorLayout, list_devices


def test_seed003_layout_map_docstring():
    layout_map = LayoutMap(device_mesh=None)
    layout_map['dense.*kernel'] = (None, 'model')         # layout_2d
    layout_map['dense.*bias'] = ('model',)                # layout_1d
    layout_map['conv2d.*kernel'] = TensorLayout((None, None, None, 'model'))
    layout_map['conv2d.*bias'] = TensorLayout(('model',))  # layout_1d

    layout_1 = layout_map['dense_1.kernel']             # layout_1 == layout_2d
    layout_2 = layout_map['dense_1.bias']               # layout_2 == layout_1d
    layout_3 = layout_map['dense_2.kernel']             # layout_3 == layout_2d
    layout_4 = layout_map['dense_2.bias']               # layout_4 == layout_1d
    layout_5 = layout_map['my_model/conv2d_123/kernel'] # layout_5 == layout_4d
    layout_6 = layout_map['my_model/conv2d_123/bias']   # layout_6 == layout_1d
    layout_7 = layout_map['my_model/conv3d_1/kernel']   # layout_7 == None
    layout_8 = layout_map['my_model/conv3d_1/bias']     # layout_8 == None

    layout_2d = TensorLayout((None, 'model'))
    layout_1d = TensorLayout(('model',))
    layout_4d = TensorLayout((None, None, None, 'model'))
    assert layout_1 == layout_2d and layout_1.axes == (None, 'model')
    assert layout_2 == layout_1d and layout_2.axes == ('model',)
    assert layout_3 == layout_2d and layout_3 is layout_1  # the one stored object
    assert layout_4 == layout_1d and layout_4 is layout_2
    assert layout_5 == layout_4d and layout_5.axes == (None, None, None, 'model')
    assert layout_6 == layout_1d and layout_6 is not layout_2  # the conv2d bias rule
    assert layout_7 is None
    assert layout_8 is None
    assert layout_1.device_mesh is None  # no mesh anywhere


def test_seed003_device_mesh_populates_layouts():
    # "device_mesh: used to populate the TensorLayout.device_mesh if it is not set".
    device_mesh = DeviceMesh((2, 4), ['batch', 'model'])
    layout_map = LayoutMap(device_mesh=device_mesh)
    kernel = TensorLayout((None, 'model'))
    layout_map['dense.*kernel'] = kernel
    assert kernel.device_mesh == device_mesh  # Keras mutates the caller's layout
    assert layout_map['dense_1.kernel'] is kernel
    assert layout_map.device_mesh == device_mesh
    # DeviceMesh(shape, axis_names, devices=None): devices default to list_devices().
    assert device_mesh.devices.shape == (2, 4)
    assert list(device_mesh.devices.ravel()) == list_devices()
    # TensorLayout(axes, device_mesh=None): the mesh can be attached later.
    layout = TensorLayout(('batch', None))
    layout.device_mesh = device_mesh
    assert layout == TensorLayout(('batch', None), device_mesh)
