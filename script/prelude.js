// The JavaScript half of require("zeroeng"): the module system (nn.Module
// and the standard layers) and the public shape of nn and optim, written
// over the native functions of the Go half (script/nn_native.go,
// script/optim_native.go). Modules find their parameters, buffers and
// children from their own properties, in assignment order, which is
// PyTorch's registration order, so that names are PyTorch's ("0.weight",
// "blocks.2.ln1.bias").
(function (zeroeng, native) {
  'use strict';
  const { tensor } = zeroeng;
  const F = native.functional;

  // callable makes a class usable with and without `new`, as nn.Linear(…)
  // and optim.AdamW(…) are in the host API, and still subclassable. A
  // construct call is told from a plain one by `this`, not by new.target
  // alone: goja leaks the enclosing constructor's new.target into plain
  // calls made inside it, so nn.Linear(…) in a Module's constructor would
  // build a Linear with the enclosing class's prototype.
  function callable(Cls) {
    function Factory(...args) {
      const constructing = new.target !== undefined && this instanceof Factory;
      return Reflect.construct(Cls, args, constructing ? new.target : Factory);
    }
    Object.defineProperty(Factory, 'name', { value: Cls.name });
    Factory.prototype = Cls.prototype;
    Object.setPrototypeOf(Factory, Cls);
    return Factory;
  }

  // Node's util.inspect.custom: the REPL and console.log print an object
  // with a method under it as the method's result.
  const inspectCustom = Symbol.for('nodejs.util.inspect.custom');

  const hidden = (obj, name, value) =>
    Object.defineProperty(obj, name, { value, writable: true, enumerable: false, configurable: true });

  class Module {
    // A module is callable, model(x) as in PyTorch: the constructor returns
    // an arrow function carrying the subclass's prototype, which every
    // subclass constructor then fills as its this. model(x) costs one call
    // more than model.forward(x), and nothing else changes: the arrow's own
    // name and length are deleted so that a module may use those names.
    constructor() {
      const self = (...args) => self.forward(...args);
      delete self.name;
      delete self.length;
      Object.setPrototypeOf(self, new.target.prototype);
      hidden(self, '_training', true);
      hidden(self, '_buffers', new Set());
      return self;
    }

    forward() {
      throw new Error(`${this.constructor.name}.forward is not implemented`);
    }

    get training() { return this._training; }

    // Own entries, in property order: [name, value, kind].
    _entries() {
      const out = [];
      for (const [k, v] of Object.entries(this)) {
        if (v instanceof Module) out.push([k, v, 'module']);
        else if (tensor.isTensor(v) && native.isParameter(v)) out.push([k, v, 'param']);
        else if (tensor.isTensor(v) && this._buffers.has(k)) out.push([k, v, 'buffer']);
      }
      return out;
    }

    // namedChildren and children look only for modules: they run on every
    // Sequential.forward, where _entries' tensor checks would cost more
    // than small layers' arithmetic.
    namedChildren() {
      const out = [];
      for (const k of Object.keys(this)) {
        const v = this[k];
        if (v instanceof Module) out.push([k, v]);
      }
      return out;
    }
    children() {
      const out = [];
      for (const k of Object.keys(this)) {
        const v = this[k];
        if (v instanceof Module) out.push(v);
      }
      return out;
    }

    namedModules(prefix = '') {
      const out = [[prefix, this]];
      for (const [k, m] of this.namedChildren()) out.push(...m.namedModules(prefix ? `${prefix}.${k}` : k));
      return out;
    }
    modules() { return this.namedModules().map(e => e[1]); }

    // namedParameters lists each parameter once, under its first name.
    namedParameters(prefix = '', seen = new Set()) {
      const out = [];
      const entries = this._entries();
      for (const [k, v, kind] of entries) {
        if (kind === 'param' && !seen.has(v)) { seen.add(v); out.push([prefix + k, v]); }
      }
      for (const [k, v, kind] of entries) {
        if (kind === 'module') out.push(...v.namedParameters(`${prefix}${k}.`, seen));
      }
      return out;
    }
    parameters() { return this.namedParameters().map(e => e[1]); }

    namedBuffers(prefix = '') {
      const out = [];
      for (const [k, v, kind] of this._entries()) {
        if (kind === 'buffer') out.push([prefix + k, v]);
        if (kind === 'module') out.push(...v.namedBuffers(`${prefix}${k}.`));
      }
      return out;
    }
    buffers() { return this.namedBuffers().map(e => e[1]); }

    registerBuffer(name, value) {
      if (value !== null && !tensor.isTensor(value)) throw new TypeError(`registerBuffer: ${name} must be a tensor or null`);
      if (value) value.keep();
      this._buffers.add(name);
      this[name] = value;
    }

    // stateDict(opts?): each module's parameters, then its buffers, then
    // its children, as PyTorch orders them: the tensors themselves. Under
    // ZeRO stage 3 it is collective (every rank calls it) with FSDP's
    // choices: { type: "full" } (the default) copies of the whole tensors,
    // each gathered in turn (never the whole model at once), on every rank
    // or, with rank0Only, on rank 0 only (the others get {}); { type:
    // "sharded" } each rank's own part of every parameter as { shard,
    // offset, shape }, without communication. offloadToCpu changes nothing
    // on a CPU rank. stateDict(prefix, out) is the raw form.
    stateDict(opts) {
      if (typeof opts === 'string') return this._rawStateDict(opts, arguments[1] ?? {});
      const { type = 'full', rank0Only = false, offloadToCpu = false } = options('Module.stateDict', opts, 'type', 'rank0Only', 'offloadToCpu');
      return native.zero.stateDict(this._rawStateDict(), type, rank0Only, offloadToCpu);
    }

    // _rawStateDict is stateDict's tensors themselves, sharded or not
    // (what checkpoints save from and load into).
    _rawStateDict(prefix = '', out = {}) {
      const entries = this._entries();
      for (const [k, v, kind] of entries) if (kind === 'param') out[prefix + k] = v;
      for (const [k, v, kind] of entries) if (kind === 'buffer') out[prefix + k] = v;
      for (const [k, v, kind] of entries) if (kind === 'module') v._rawStateDict(`${prefix}${k}.`, out);
      return out;
    }

    // loadStateDict copies a state dict in. Under ZeRO stage 3 each rank
    // writes its own slices from the whole tensors (a full state dict, on
    // every rank) or from its shards (a sharded one, made under the same
    // ranks and units), without gathering and without communication.
    loadStateDict(stateDict, strict = true) {
      if (native.zero.sharded(this.parameters())) return native.zero.loadStateDict(this._rawStateDict(), stateDict, strict);
      return native.loadStateDict(this._rawStateDict(), stateDict, strict);
    }

    train(mode = true) {
      for (const m of this.modules()) m._training = mode;
      return this;
    }
    eval() { return this.train(false); }

    // zeroGrad(setToNone = false), or zeroGrad({ setToNone }), as PyTorch
    // 1.13's (set_to_none=False).
    zeroGrad(setToNone = false) {
      if (setToNone !== null && typeof setToNone === 'object') ({ setToNone = false } = options('Module.zeroGrad', setToNone, 'setToNone'));
      tensor.noGrad(() => {
        for (const p of this.parameters()) {
          if (setToNone) p.grad = null;
          else if (p.grad) p.grad.zero_();
        }
      });
    }

    apply(fn) {
      for (const m of this.children()) m.apply(fn);
      fn(this);
      return this;
    }

    // to(dtype) converts floating-point parameters and buffers in place
    // (each keeps its identity); to(device) accepts the rank's own device;
    // to({ dtype, device }) does both (checked in Go, native.moduleTo).
    // A bfloat16 model trains with float32 master weights in the optimizer.
    to(arg) {
      native.moduleTo([...this.namedParameters(), ...this.namedBuffers()], arg);
      return this;
    }
    bfloat16() { return this.to('bfloat16'); }
    half() { return this.to('float16'); }
    float() { return this.to('float32'); }
    double() { return this.to('float64'); }

    numParameters() { return this.parameters().reduce((n, p) => n + p.numel(), 0); }

    extraRepr() { return ''; }

    // The REPL and console.log print a module as PyTorch does.
    [inspectCustom]() { return this.toString(); }

    toString() {
      const kids = this.namedChildren();
      const extra = this.extraRepr();
      if (kids.length === 0) return `${this.constructor.name}(${extra})`;
      const lines = kids.map(([k, m]) => `  (${k}): ` + String(m).split('\n').join('\n  '));
      return `${this.constructor.name}(\n${lines.join('\n')}\n)`;
    }
  }

  // options checks an options object against the keys fn takes, as the
  // Go half checks its own: an unknown key is a TypeError naming it and
  // the key meant ("did you mean elementwiseAffine?").
  const options = (fn, o, ...keys) => {
    if (o !== undefined && o !== null && (typeof o !== 'object' || Array.isArray(o))) {
      throw new TypeError(`${fn}: options must be an object { ${keys.join(', ')} }, got ${typeof o}`);
    }
    native.checkOptions(fn, o, keys);
    return o ?? {};
  };

  // nn.init: torch.nn.init's in-place initialisers, drawing from the
  // rank's generator; normal_(t, mean, std) or normal_(t, { mean, std }).
  // The random ones write into t's own memory, with PyTorch's values
  // (tensor.normal_(mean, std) and tensor.uniform_(a, b)) and no temporary
  // of t's size.
  const init = Object.freeze({
    normal_(t, mean = 0, std = 1) {
      if (typeof mean === 'object') ({ mean = 0, std = 1 } = options('nn.init.normal_', mean, 'mean', 'std'));
      tensor.noGrad(() => native.normalInit(t, mean, std));
      return t;
    },
    uniform_(t, a = 0, b = 1) {
      if (typeof a === 'object') ({ a = 0, b = 1 } = options('nn.init.uniform_', a, 'a', 'b'));
      tensor.noGrad(() => native.uniformInit(t, a, b));
      return t;
    },
    // truncNormal_(t, mean, std, a, b): N(mean, std²) truncated to [a, b]
    // (absolute bounds, as PyTorch's), by PyTorch's inverse-CDF method.
    truncNormal_(t, mean = 0, std = 1, a = -2, b = 2) {
      if (typeof mean === 'object') ({ mean = 0, std = 1, a = -2, b = 2 } = options('nn.init.truncNormal_', mean, 'mean', 'std', 'a', 'b'));
      tensor.noGrad(() => native.truncNormal(t, mean, std, a, b));
      return t;
    },
    constant_(t, v) { tensor.noGrad(() => t.fill_(v)); return t; },
    zeros_(t) { tensor.noGrad(() => t.zero_()); return t; },
    ones_(t) { tensor.noGrad(() => t.fill_(1)); return t; },
    // calculateGain(nonlinearity, param): torch.nn.init.calculate_gain.
    calculateGain(nonlinearity, param) {
      switch (nonlinearity) {
        case 'linear': case 'conv1d': case 'conv2d': case 'conv3d': case 'sigmoid': return 1;
        case 'tanh': return 5 / 3;
        case 'relu': return Math.SQRT2;
        case 'leaky_relu': {
          const slope = param === undefined || param === null ? 0.01 : param;
          if (typeof slope !== 'number') throw new TypeError(`nn.init.calculateGain: negative_slope ${slope} is not a number`);
          return Math.sqrt(2 / (1 + slope * slope));
        }
        case 'selu': return 3 / 4;
      }
      throw new RangeError(`nn.init.calculateGain: unsupported nonlinearity ${nonlinearity}`);
    },
    // The fan-based initialisers of torch.nn.init, on the draws of
    // uniform_ and normal_.
    xavierUniform_(t, gain = 1) {
      const [fanIn, fanOut] = fans('nn.init.xavierUniform_', t);
      const b = Math.sqrt(3) * (gain * Math.sqrt(2 / (fanIn + fanOut))); // as PyTorch rounds it
      return init.uniform_(t, -b, b);
    },
    xavierNormal_(t, gain = 1) {
      const [fanIn, fanOut] = fans('nn.init.xavierNormal_', t);
      return init.normal_(t, 0, gain * Math.sqrt(2 / (fanIn + fanOut)));
    },
    kaimingUniform_(t, opts) {
      const std = kaimingStd('nn.init.kaimingUniform_', t, opts);
      const b = Math.sqrt(3) * std;
      return init.uniform_(t, -b, b);
    },
    kaimingNormal_(t, opts) {
      return init.normal_(t, 0, kaimingStd('nn.init.kaimingNormal_', t, opts));
    },
  });
  // fans is torch.nn.init._calculate_fan_in_and_fan_out.
  function fans(fn, t) {
    if (t.dim() < 2) throw new RangeError(`${fn}: fan in and fan out cannot be computed for a tensor of fewer than 2 dimensions`);
    const receptive = t.shape.slice(2).reduce((a, b) => a * b, 1);
    return [t.shape[1] * receptive, t.shape[0] * receptive];
  }
  function kaimingStd(fn, t, opts) {
    const { a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu' } = options(fn, opts, 'a', 'mode', 'nonlinearity');
    if (mode !== 'fan_in' && mode !== 'fan_out') throw new RangeError(`${fn}: mode must be 'fan_in' or 'fan_out', got ${mode}`);
    const [fanIn, fanOut] = fans(fn, t);
    return init.calculateGain(nonlinearity, a) / Math.sqrt(mode === 'fan_in' ? fanIn : fanOut);
  }

  const pyBool = b => (b ? 'True' : 'False');

  class Linear extends Module {
    // Linear(in, out, bias = true), or Linear(in, out, { bias }).
    constructor(inFeatures, outFeatures, bias = true) {
      super();
      if (bias !== null && typeof bias === 'object') ({ bias = true } = options('nn.Linear', bias, 'bias'));
      const [w, b] = native.linearInit(inFeatures, outFeatures, bias !== false);
      this.weight = Parameter(w);
      this.bias = b ? Parameter(b) : null;
      hidden(this, 'inFeatures', inFeatures);
      hidden(this, 'outFeatures', outFeatures);
    }
    forward(x) { return F.linear(x, this.weight, this.bias); }
    extraRepr() { return `in_features=${this.inFeatures}, out_features=${this.outFeatures}, bias=${pyBool(this.bias)}`; }
  }

  class Embedding extends Module {
    constructor(numEmbeddings, embeddingDim, opts = {}) {
      super();
      let paddingIdx = options('nn.Embedding', opts, 'paddingIdx').paddingIdx ?? null;
      this.weight = Parameter(native.embeddingInit(numEmbeddings, embeddingDim, paddingIdx));
      // As PyTorch's: a negative paddingIdx (checked in range by
      // embeddingInit) counts from the end and is kept as the row it names.
      if (paddingIdx !== null && paddingIdx < 0) paddingIdx += numEmbeddings;
      hidden(this, 'numEmbeddings', numEmbeddings);
      hidden(this, 'embeddingDim', embeddingDim);
      hidden(this, 'paddingIdx', paddingIdx);
    }
    forward(idx) {
      return F.embedding(idx, this.weight, this.paddingIdx === null ? {} : { paddingIdx: this.paddingIdx });
    }
    extraRepr() { return `${this.numEmbeddings}, ${this.embeddingDim}`; }
  }

  class LayerNorm extends Module {
    // LayerNorm(shape, eps) or LayerNorm(shape, { eps, elementwiseAffine }).
    constructor(normalizedShape, opts = {}) {
      super();
      const shape = Array.isArray(normalizedShape) ? normalizedShape : [normalizedShape];
      const o = typeof opts === 'number' ? { eps: opts } : options('nn.LayerNorm', opts, 'eps', 'elementwiseAffine');
      const eps = o.eps ?? 1e-5;
      const affine = o.elementwiseAffine ?? true;
      hidden(this, 'normalizedShape', shape);
      hidden(this, 'eps', eps);
      if (affine) {
        this.weight = Parameter(tensor.ones(shape));
        this.bias = Parameter(tensor.zeros(shape));
      } else {
        this.weight = null;
        this.bias = null;
      }
    }
    forward(x) { return F.layerNorm(x, this.normalizedShape, this.weight, this.bias, this.eps); }
    extraRepr() {
      return `(${this.normalizedShape.join(', ')}${this.normalizedShape.length === 1 ? ',' : ''}), eps=${this.eps}, elementwise_affine=${pyBool(this.weight)}`;
    }
  }

  class Dropout extends Module {
    // Dropout(p = 0.5), or Dropout({ p }).
    constructor(p = 0.5) {
      super();
      if (p !== null && typeof p === 'object') ({ p = 0.5 } = options('nn.Dropout', p, 'p'));
      if (!(p >= 0 && p <= 1)) throw new RangeError(`dropout probability has to be between 0 and 1, but got ${p}`);
      hidden(this, 'p', p);
    }
    forward(x) { return F.dropout(x, this.p, this.training); }
    extraRepr() { return `p=${this.p}, inplace=False`; }
  }

  // Python's spellings of values in reprs, as PyTorch prints its layers:
  // floats as repr() writes them (1e-05, 0.1), tuples with their commas.
  const pyFloat = v => {
    if (v === null || v === undefined) return 'None';
    if (Number.isNaN(v)) return 'nan';
    if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
    const [mant, exp] = v.toExponential().split('e');
    const e = Number(exp);
    if (e < -4 || e >= 16) return `${mant}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
    const s = String(v);
    return s.includes('.') ? s : `${s}.0`;
  };
  const pyTuple = a => `(${a.join(', ')}${a.length === 1 ? ',' : ''})`;
  const pyIntOrTuple = v => (Array.isArray(v) ? pyTuple(v) : String(v));

  // ntuple is PyTorch's _single/_pair: an integer stands for n equal
  // ones; an array must have n integers.
  const ntuple = (fn, what, v, n) => {
    const a = Array.isArray(v) ? v : Array(n).fill(v);
    if (a.length !== n || !a.every(Number.isInteger)) {
      throw new TypeError(`${fn}: ${what} must be an integer or an array of ${n} integers, got ${JSON.stringify(v)}`);
    }
    return [...a];
  };
  const positiveInt = (fn, what, v) => {
    if (!Number.isInteger(v) || v <= 0) throw new RangeError(`${fn}: ${what} must be a positive integer, got ${v}`);
    return v;
  };

  // _ConvNd: the weight [out, in/groups, ...kernel] and bias [out] drawn as
  // PyTorch's reset_parameters draws them (native.convInit), PyTorch's
  // argument checks, and padding as numbers or "same" / "valid".
  class ConvNd extends Module {
    constructor(fn, nd, inChannels, outChannels, kernelSize, o) {
      super();
      const { stride = 1, padding = 0, dilation = 1, groups = 1, bias = true, paddingMode = 'zeros' } = o;
      positiveInt(fn, 'inChannels', inChannels);
      positiveInt(fn, 'outChannels', outChannels);
      if (!Number.isInteger(groups) || groups <= 0) throw new RangeError(`${fn}: groups must be a positive integer, got ${groups}`);
      if (inChannels % groups !== 0) throw new RangeError(`${fn}: inChannels must be divisible by groups (${inChannels} and ${groups})`);
      if (outChannels % groups !== 0) throw new RangeError(`${fn}: outChannels must be divisible by groups (${outChannels} and ${groups})`);
      const kernel = ntuple(fn, 'kernelSize', kernelSize, nd);
      const strides = ntuple(fn, 'stride', stride, nd);
      const dilations = ntuple(fn, 'dilation', dilation, nd);
      let pad;
      if (typeof padding === 'string') {
        if (padding !== 'same' && padding !== 'valid') throw new RangeError(`${fn}: invalid padding string '${padding}', should be one of 'valid', 'same'`);
        if (padding === 'same' && strides.some(s => s !== 1)) throw new RangeError(`${fn}: padding='same' is not supported for strided convolutions`);
        pad = padding;
      } else {
        pad = ntuple(fn, 'padding', padding, nd);
      }
      if (!['zeros', 'reflect', 'replicate', 'circular'].includes(paddingMode)) {
        throw new RangeError(`${fn}: paddingMode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got paddingMode='${paddingMode}'`);
      }
      if (paddingMode !== 'zeros') throw new RangeError(`${fn}: paddingMode '${paddingMode}' is not implemented; only 'zeros' is`);
      const [w, b] = native.convInit(fn, [outChannels, inChannels / groups, ...kernel], bias !== false);
      this.weight = Parameter(w);
      this.bias = b ? Parameter(b) : null;
      hidden(this, 'inChannels', inChannels);
      hidden(this, 'outChannels', outChannels);
      hidden(this, 'kernelSize', kernel);
      hidden(this, 'stride', strides);
      hidden(this, 'padding', pad);
      hidden(this, 'dilation', dilations);
      hidden(this, 'groups', groups);
      hidden(this, 'paddingMode', paddingMode);
      hidden(this, '_conv', nd === 1 ? F.conv1d : F.conv2d);
    }
    forward(x) {
      return this._conv(x, this.weight, this.bias, { stride: this.stride, padding: this.padding, dilation: this.dilation, groups: this.groups });
    }
    extraRepr() {
      let s = `${this.inChannels}, ${this.outChannels}, kernel_size=${pyTuple(this.kernelSize)}, stride=${pyTuple(this.stride)}`;
      if (typeof this.padding === 'string') s += `, padding=${this.padding}`;
      else if (this.padding.some(p => p !== 0)) s += `, padding=${pyTuple(this.padding)}`;
      if (this.dilation.some(d => d !== 1)) s += `, dilation=${pyTuple(this.dilation)}`;
      if (this.groups !== 1) s += `, groups=${this.groups}`;
      if (!this.bias) s += ', bias=False';
      return s;
    }
  }

  // Conv1d(in, out, kernelSize, { stride, padding, dilation, groups, bias, paddingMode }).
  class Conv1d extends ConvNd {
    constructor(inChannels, outChannels, kernelSize, opts) {
      super('nn.Conv1d', 1, inChannels, outChannels, kernelSize,
        options('nn.Conv1d', opts, 'stride', 'padding', 'dilation', 'groups', 'bias', 'paddingMode'));
    }
  }

  // Conv2d(in, out, kernelSize, { stride, padding, dilation, groups, bias, paddingMode }).
  class Conv2d extends ConvNd {
    constructor(inChannels, outChannels, kernelSize, opts) {
      super('nn.Conv2d', 2, inChannels, outChannels, kernelSize,
        options('nn.Conv2d', opts, 'stride', 'padding', 'dilation', 'groups', 'bias', 'paddingMode'));
    }
  }

  // MaxPool2d(kernelSize, { stride = kernelSize, padding, dilation, ceilMode }).
  class MaxPool2d extends Module {
    constructor(kernelSize, opts) {
      super();
      const fn = 'nn.MaxPool2d';
      const { stride = null, padding = 0, dilation = 1, ceilMode = false } = options(fn, opts, 'stride', 'padding', 'dilation', 'ceilMode');
      ntuple(fn, 'kernelSize', kernelSize, 2);
      if (stride !== null) ntuple(fn, 'stride', stride, 2);
      ntuple(fn, 'padding', padding, 2);
      ntuple(fn, 'dilation', dilation, 2);
      hidden(this, 'kernelSize', kernelSize);
      hidden(this, 'stride', stride ?? kernelSize);
      hidden(this, 'padding', padding);
      hidden(this, 'dilation', dilation);
      hidden(this, 'ceilMode', Boolean(ceilMode));
    }
    forward(x) {
      return F.maxPool2d(x, this.kernelSize, { stride: this.stride, padding: this.padding, dilation: this.dilation, ceilMode: this.ceilMode });
    }
    extraRepr() {
      return `kernel_size=${pyIntOrTuple(this.kernelSize)}, stride=${pyIntOrTuple(this.stride)}, padding=${pyIntOrTuple(this.padding)}, dilation=${pyIntOrTuple(this.dilation)}, ceil_mode=${pyBool(this.ceilMode)}`;
    }
  }

  // AvgPool2d(kernelSize, { stride = kernelSize, padding, ceilMode,
  // countIncludePad = true, divisorOverride }).
  class AvgPool2d extends Module {
    constructor(kernelSize, opts) {
      super();
      const fn = 'nn.AvgPool2d';
      const { stride = null, padding = 0, ceilMode = false, countIncludePad = true, divisorOverride = null } =
        options(fn, opts, 'stride', 'padding', 'ceilMode', 'countIncludePad', 'divisorOverride');
      ntuple(fn, 'kernelSize', kernelSize, 2);
      if (stride !== null) ntuple(fn, 'stride', stride, 2);
      ntuple(fn, 'padding', padding, 2);
      if (divisorOverride !== null && !Number.isInteger(divisorOverride)) {
        throw new TypeError(`${fn}: divisorOverride must be an integer or null, got ${divisorOverride}`);
      }
      hidden(this, 'kernelSize', kernelSize);
      hidden(this, 'stride', stride ?? kernelSize);
      hidden(this, 'padding', padding);
      hidden(this, 'ceilMode', Boolean(ceilMode));
      hidden(this, 'countIncludePad', Boolean(countIncludePad));
      hidden(this, 'divisorOverride', divisorOverride);
    }
    forward(x) {
      return F.avgPool2d(x, this.kernelSize, {
        stride: this.stride, padding: this.padding, ceilMode: this.ceilMode,
        countIncludePad: this.countIncludePad, divisorOverride: this.divisorOverride,
      });
    }
    // PyTorch prints only these three, whatever the other options are.
    extraRepr() {
      return `kernel_size=${pyIntOrTuple(this.kernelSize)}, stride=${pyIntOrTuple(this.stride)}, padding=${pyIntOrTuple(this.padding)}`;
    }
  }

  // AdaptiveAvgPool2d(outputSize): an integer, or [h, w] where null keeps
  // the input's size.
  class AdaptiveAvgPool2d extends Module {
    constructor(outputSize) {
      super();
      const fn = 'nn.AdaptiveAvgPool2d';
      const ok = v => v === null || (Number.isInteger(v) && v >= 0);
      if (Array.isArray(outputSize) ? outputSize.length !== 2 || !outputSize.every(ok) : !(Number.isInteger(outputSize) && outputSize >= 0)) {
        throw new TypeError(`${fn}: outputSize must be a non-negative integer or an array of 2 (non-negative integers or null), got ${JSON.stringify(outputSize)}`);
      }
      hidden(this, 'outputSize', Array.isArray(outputSize) ? [...outputSize] : outputSize);
    }
    forward(x) { return F.adaptiveAvgPool2d(x, this.outputSize); }
    extraRepr() {
      const s = this.outputSize;
      return `output_size=${Array.isArray(s) ? pyTuple(s.map(v => (v === null ? 'None' : v))) : s}`;
    }
  }

  // Dropout2d(p = 0.5, { inplace }), or Dropout2d({ p, inplace }): whole
  // channels zeroed (nn.functional.dropout2d).
  class Dropout2d extends Module {
    constructor(p = 0.5, opts) {
      super();
      const fn = 'nn.Dropout2d';
      let inplace;
      if (p !== null && typeof p === 'object') ({ p = 0.5, inplace = false } = options(fn, p, 'p', 'inplace'));
      else ({ inplace = false } = options(fn, opts, 'inplace'));
      if (!(p >= 0 && p <= 1)) throw new RangeError(`${fn}: dropout probability has to be between 0 and 1, but got ${p}`);
      hidden(this, 'p', p);
      hidden(this, 'inplace', Boolean(inplace));
    }
    forward(x) { return F.dropout2d(x, this.p, this.training, this.inplace); }
    extraRepr() { return `p=${this.p}, inplace=${pyBool(this.inplace)}`; }
  }

  // RMSNorm(shape, eps?) or RMSNorm(shape, { eps, elementwiseAffine }),
  // PyTorch 2.4's: eps null takes the input's machine epsilon at forward.
  class RMSNorm extends Module {
    constructor(normalizedShape, opts) {
      super();
      const shape = Array.isArray(normalizedShape) ? [...normalizedShape] : [normalizedShape];
      shape.forEach(d => positiveInt('nn.RMSNorm', 'normalizedShape', d));
      const o = typeof opts === 'number' ? { eps: opts } : options('nn.RMSNorm', opts, 'eps', 'elementwiseAffine');
      hidden(this, 'normalizedShape', shape);
      hidden(this, 'eps', o.eps ?? null);
      this.weight = (o.elementwiseAffine ?? true) ? Parameter(tensor.ones(shape)) : null;
    }
    forward(x) { return F.rmsNorm(x, this.normalizedShape, this.weight, this.eps); }
    extraRepr() { return `${pyTuple(this.normalizedShape)}, eps=${pyFloat(this.eps)}, elementwise_affine=${pyBool(this.weight)}`; }
  }

  // _BatchNorm: weight and bias (affine), and the buffers running_mean,
  // running_var and num_batches_tracked under PyTorch's names (their
  // state-dict keys), also read as runningMean, runningVar and
  // numBatchesTracked. momentum null averages over every batch seen.
  class BatchNormBase extends Module {
    constructor(fn, numFeatures, o) {
      super();
      positiveInt(fn, 'numFeatures', numFeatures);
      const { eps = 1e-5, affine = true, trackRunningStats = true } = o;
      const momentum = o.momentum === undefined ? 0.1 : o.momentum;
      if (momentum !== null && typeof momentum !== 'number') throw new TypeError(`${fn}: momentum must be a number or null, got ${typeof momentum}`);
      hidden(this, 'numFeatures', numFeatures);
      hidden(this, 'eps', eps);
      hidden(this, 'momentum', momentum);
      hidden(this, 'affine', Boolean(affine));
      hidden(this, 'trackRunningStats', Boolean(trackRunningStats));
      this.weight = affine ? Parameter(tensor.ones([numFeatures])) : null;
      this.bias = affine ? Parameter(tensor.zeros([numFeatures])) : null;
      const track = Boolean(trackRunningStats);
      this.registerBuffer('running_mean', track ? tensor.zeros([numFeatures]) : null);
      this.registerBuffer('running_var', track ? tensor.ones([numFeatures]) : null);
      this.registerBuffer('num_batches_tracked', track ? tensor.zeros([], { dtype: 'int64' }) : null);
    }
    get runningMean() { return this.running_mean; }
    set runningMean(t) { this.registerBuffer('running_mean', t); }
    get runningVar() { return this.running_var; }
    set runningVar(t) { this.registerBuffer('running_var', t); }
    get numBatchesTracked() { return this.num_batches_tracked; }
    set numBatchesTracked(t) { this.registerBuffer('num_batches_tracked', t); }

    // _args: F.batchNorm's arguments for this forward, as _BatchNorm.forward
    // decides them; counts the batch when training with running statistics.
    _args() {
      let factor = this.momentum ?? 0;
      if (this.training && this.trackRunningStats && this.num_batches_tracked) {
        tensor.noGrad(() => this.num_batches_tracked.add_(1));
        factor = this.momentum === null ? 1 / this.num_batches_tracked.item() : this.momentum;
      }
      const buffers = !this.training || this.trackRunningStats;
      return {
        runningMean: buffers ? this.running_mean : null,
        runningVar: buffers ? this.running_var : null,
        training: this.training || (this.running_mean === null && this.running_var === null),
        momentum: factor,
      };
    }
    forward(x) {
      this._checkInputDim(x);
      const a = this._args();
      return F.batchNorm(x, a.runningMean, a.runningVar, { weight: this.weight, bias: this.bias, training: a.training, momentum: a.momentum, eps: this.eps });
    }
    extraRepr() {
      return `${this.numFeatures}, eps=${pyFloat(this.eps)}, momentum=${pyFloat(this.momentum)}, affine=${pyBool(this.affine)}, track_running_stats=${pyBool(this.trackRunningStats)}`;
    }
  }

  // BatchNorm1d(numFeatures, { eps, momentum, affine, trackRunningStats }) over [N, C] or [N, C, L].
  class BatchNorm1d extends BatchNormBase {
    constructor(numFeatures, opts) {
      super('nn.BatchNorm1d', numFeatures, options('nn.BatchNorm1d', opts, 'eps', 'momentum', 'affine', 'trackRunningStats'));
    }
    _checkInputDim(x) {
      if (x.dim() !== 2 && x.dim() !== 3) throw new RangeError(`nn.BatchNorm1d: expected 2D or 3D input (got ${x.dim()}D input)`);
    }
  }

  // BatchNorm2d(numFeatures, { eps, momentum, affine, trackRunningStats }) over [N, C, H, W].
  class BatchNorm2d extends BatchNormBase {
    constructor(numFeatures, opts) {
      super('nn.BatchNorm2d', numFeatures, options('nn.BatchNorm2d', opts, 'eps', 'momentum', 'affine', 'trackRunningStats'));
    }
    _checkInputDim(x) {
      if (x.dim() !== 4) throw new RangeError(`nn.BatchNorm2d: expected 4D input (got ${x.dim()}D input)`);
    }
  }

  // SyncBatchNorm(numFeatures, { eps, momentum, affine, trackRunningStats,
  // processGroup }): in training, the statistics are those of the whole
  // batch of every rank of processGroup (all ranks by default), summed in
  // Go (native.syncBatchNorm), and so are their gradients in backward;
  // every rank must run each forward and backward. Otherwise, and in a
  // group of one rank, it is BatchNorm.
  class SyncBatchNorm extends BatchNormBase {
    constructor(numFeatures, opts) {
      const o = options('nn.SyncBatchNorm', opts, 'eps', 'momentum', 'affine', 'trackRunningStats', 'processGroup');
      super('nn.SyncBatchNorm', numFeatures, o);
      hidden(this, 'processGroup', o.processGroup ?? null);
    }
    _checkInputDim(x) {
      if (x.dim() < 2) throw new RangeError(`nn.SyncBatchNorm: expected at least 2D input (got ${x.dim()}D input)`);
      if (x.shape[1] === 0) throw new RangeError('nn.SyncBatchNorm: number of input channels should be non-zero');
    }
    forward(x) {
      this._checkInputDim(x);
      const a = this._args();
      const pg = this.processGroup ?? zeroeng.dist;
      if (!(a.training && this.training) || (pg.size ?? pg.worldSize) <= 1) {
        return F.batchNorm(x, a.runningMean, a.runningVar, { weight: this.weight, bias: this.bias, training: a.training, momentum: a.momentum, eps: this.eps });
      }
      return native.syncBatchNorm(x, a.runningMean, a.runningVar, this.weight, this.bias, a.momentum, this.eps, this.processGroup);
    }

    // convertSyncBatchnorm(module, processGroup?): PyTorch's
    // convert_sync_batchnorm: every BatchNorm in module becomes a
    // SyncBatchNorm holding the same parameters and buffers (an optimizer
    // made before still updates them); a BatchNorm given itself is
    // returned converted, any other module converted in place.
    static convertSyncBatchnorm(module, processGroup = null) {
      if (!(module instanceof Module)) throw new TypeError('nn.SyncBatchNorm.convertSyncBatchnorm: expects an nn.Module');
      let out = module;
      if (module instanceof BatchNormBase) {
        out = new SyncBatchNorm(module.numFeatures, {
          eps: module.eps, momentum: module.momentum, affine: module.affine,
          trackRunningStats: module.trackRunningStats, processGroup,
        });
        if (module.affine) {
          out.weight = module.weight;
          out.bias = module.bias;
        }
        out.running_mean = module.running_mean;
        out.running_var = module.running_var;
        out.num_batches_tracked = module.num_batches_tracked;
      }
      for (const [name, child] of module.namedChildren()) out[name] = SyncBatchNorm.convertSyncBatchnorm(child, processGroup);
      return out;
    }
  }

  // MultiheadAttention(embedDim, numHeads, { dropout, bias, batchFirst,
  // kdim, vdim }), PyTorch's, with its parameters in_proj_weight [3E, E],
  // in_proj_bias [3E] and out_proj (a Linear), drawn as PyTorch draws
  // them: out_proj's Linear initialisation, then xavier_uniform_ on
  // in_proj_weight, then zero biases. kdim and vdim other than embedDim
  // (separate projection weights) are not supported.
  class NonDynamicallyQuantizableLinear extends Linear {}
  class MultiheadAttention extends Module {
    constructor(embedDim, numHeads, opts) {
      super();
      const fn = 'nn.MultiheadAttention';
      const { dropout = 0, bias = true, batchFirst = false, kdim = null, vdim = null } = options(fn, opts, 'dropout', 'bias', 'batchFirst', 'kdim', 'vdim');
      positiveInt(fn, 'embedDim', embedDim);
      positiveInt(fn, 'numHeads', numHeads);
      if ((kdim ?? embedDim) !== embedDim || (vdim ?? embedDim) !== embedDim) {
        throw new RangeError(`${fn}: kdim and vdim must equal embedDim (${embedDim}): separate key and value projection weights are not supported, got kdim ${kdim}, vdim ${vdim}`);
      }
      if (embedDim % numHeads !== 0) throw new RangeError(`${fn}: embedDim must be divisible by numHeads, got ${embedDim} and ${numHeads}`);
      if (!(dropout >= 0 && dropout <= 1)) throw new RangeError(`${fn}: dropout probability has to be between 0 and 1, but got ${dropout}`);
      hidden(this, 'embedDim', embedDim);
      hidden(this, 'numHeads', numHeads);
      hidden(this, 'headDim', embedDim / numHeads);
      hidden(this, 'dropout', dropout);
      hidden(this, 'batchFirst', Boolean(batchFirst));
      this.in_proj_weight = Parameter(tensor.zeros([3 * embedDim, embedDim]));
      this.in_proj_bias = bias ? Parameter(tensor.zeros([3 * embedDim])) : null;
      this.out_proj = new NonDynamicallyQuantizableLinear(embedDim, embedDim, { bias: Boolean(bias) });
      native.xavierUniform(this.in_proj_weight);
      if (bias) init.zeros_(this.out_proj.bias);
    }
    get inProjWeight() { return this.in_proj_weight; }
    get inProjBias() { return this.in_proj_bias; }
    get outProj() { return this.out_proj; }

    // forward(query, key, value, { keyPaddingMask, needWeights, attnMask,
    // averageAttnWeights, isCausal }) → [output, weights or null], as
    // PyTorch's multi_head_attention_forward computes them. isCausal is
    // PyTorch 2's hint that attnMask is the causal mask: it needs attnMask,
    // and without keyPaddingMask and needWeights the causal mask replaces it.
    forward(query, key, value, opts) {
      const fn = 'nn.MultiheadAttention.forward';
      const { keyPaddingMask = null, needWeights = true, attnMask = null, averageAttnWeights = true, isCausal = false } =
        options(fn, opts, 'keyPaddingMask', 'needWeights', 'attnMask', 'averageAttnWeights', 'isCausal');
      for (const [what, t] of [['query', query], ['key', key], ['value', value]]) {
        if (!tensor.isTensor(t)) throw new TypeError(`${fn}: ${what} must be a tensor`);
      }
      const H = this.numHeads;
      const batched = mhaShapeCheck(fn, query, key, value, keyPaddingMask, attnMask, H);
      let kpm = keyPaddingMask;
      if (batched && this.batchFirst) [query, key, value] = [query, key, value].map(t => t.transpose(0, 1));
      if (!batched) {
        [query, key, value] = [query, key, value].map(t => t.unsqueeze(1));
        if (kpm !== null) kpm = kpm.unsqueeze(0);
      }
      const [tgtLen, bsz, E] = query.shape;
      const srcLen = key.shape[0];
      if (kpm !== null && kpm.dtype !== 'bool' && !isFloat(kpm)) throw new TypeError(`${fn}: only bool and floating types of keyPaddingMask are supported, got ${kpm.dtype}`);
      if (E !== this.embedDim) throw new RangeError(`${fn}: was expecting embedding dimension of ${this.embedDim}, but got ${E}`);
      if (JSON.stringify(key.shape) !== JSON.stringify(value.shape)) throw new RangeError(`${fn}: key shape ${JSON.stringify(key.shape)} does not match value shape ${JSON.stringify(value.shape)}`);
      if (isCausal && attnMask === null) {
        throw new Error(`${fn}: need attnMask if specifying the isCausal hint (PyTorch's is_causal says that attnMask is the causal mask)`);
      }
      const [wq, wk, wv] = this.in_proj_weight.chunk(3, 0);
      const [bq, bk, bv] = this.in_proj_bias ? this.in_proj_bias.chunk(3, 0) : [null, null, null];
      let q = F.linear(query, wq, bq);
      let k = F.linear(key, wk, bk);
      let v = F.linear(value, wv, bv);

      let mask = attnMask;
      if (isCausal && kpm === null && !needWeights) {
        // PyTorch 2 hands the hint to scaled_dot_product_attention, whose
        // causal mask (upper left) then stands for attnMask.
        mask = tensor.arange(srcLen).unsqueeze(0).gt(tensor.arange(tgtLen).unsqueeze(1));
      }
      if (mask !== null) {
        if (mask.dtype === 'uint8') mask = mask.to('bool');
        else if (mask.dtype !== 'bool' && !isFloat(mask)) throw new TypeError(`${fn}: only float, byte, and bool types are supported for attnMask, not ${mask.dtype}`);
        if (mask.dim() === 2) {
          if (mask.shape[0] !== tgtLen || mask.shape[1] !== srcLen) {
            throw new RangeError(`${fn}: the shape of the 2D attnMask is ${JSON.stringify(mask.shape)}, but should be ${JSON.stringify([tgtLen, srcLen])}`);
          }
          mask = mask.unsqueeze(0);
        } else if (mask.dim() === 3) {
          if (mask.shape[0] !== bsz * H || mask.shape[1] !== tgtLen || mask.shape[2] !== srcLen) {
            throw new RangeError(`${fn}: the shape of the 3D attnMask is ${JSON.stringify(mask.shape)}, but should be ${JSON.stringify([bsz * H, tgtLen, srcLen])}`);
          }
        } else {
          throw new RangeError(`${fn}: attnMask's dimension ${mask.dim()} is not supported`);
        }
      }
      const hd = this.headDim;
      q = q.contiguous().view(tgtLen, bsz * H, hd).transpose(0, 1);
      k = k.contiguous().view(srcLen, bsz * H, hd).transpose(0, 1);
      v = v.contiguous().view(srcLen, bsz * H, hd).transpose(0, 1);
      if (kpm !== null) {
        if (kpm.shape[0] !== bsz || kpm.shape[1] !== srcLen) {
          throw new RangeError(`${fn}: expecting keyPaddingMask shape of ${JSON.stringify([bsz, srcLen])}, but got ${JSON.stringify(kpm.shape)}`);
        }
        kpm = kpm.view(bsz, 1, 1, srcLen).expand(bsz, H, 1, srcLen).reshape(bsz * H, 1, srcLen);
        if (mask === null) mask = kpm;
        else if (mask.dtype === 'bool') mask = mask.logicalOr(kpm);
        else mask = mask.expand(bsz * H, tgtLen, srcLen).maskedFill(kpm, -Infinity);
      }
      if (mask !== null && mask.dtype === 'bool') mask = tensor.zeros(mask.shape, { dtype: q.dtype }).maskedFill(mask, -Infinity);
      const p = this.training ? this.dropout : 0;
      let w = q.div(Math.sqrt(hd)).matmul(k.transpose(-2, -1));
      if (mask !== null) w = mask.add(w);
      w = w.softmax(-1);
      if (p > 0) w = F.dropout(w, p, true);
      let out = w.matmul(v).transpose(0, 1).contiguous().view(tgtLen * bsz, E);
      out = F.linear(out, this.out_proj.weight, this.out_proj.bias).view(tgtLen, bsz, E);
      let weights = null;
      if (needWeights) {
        weights = w.view(bsz, H, tgtLen, srcLen);
        if (averageAttnWeights) weights = weights.sum(1).div(H);
        if (!batched) weights = weights.squeeze(0);
      }
      if (!batched) out = out.squeeze(1);
      else if (this.batchFirst) out = out.transpose(0, 1);
      return [out, weights];
    }
  }
  const isFloat = t => ['float32', 'float64', 'bfloat16', 'float16'].includes(t.dtype);

  // mhaShapeCheck is PyTorch's _mha_shape_check: whether the inputs are
  // batched (3-D query) or not (2-D), with the masks' dimensions to match.
  function mhaShapeCheck(fn, query, key, value, kpm, attnMask, numHeads) {
    const d = query.dim();
    if (d !== 2 && d !== 3) throw new RangeError(`${fn}: query should be unbatched 2D or batched 3D tensor but received ${d}-D query tensor`);
    const what = d === 3 ? 'batched (3-D)' : 'unbatched (2-D)';
    if (key.dim() !== d || value.dim() !== d) {
      throw new RangeError(`${fn}: for ${what} query, expected key and value to be ${d}-D but found ${key.dim()}-D and ${value.dim()}-D tensors respectively`);
    }
    if (kpm !== null && kpm.dim() !== d - 1) {
      throw new RangeError(`${fn}: for ${what} query, expected keyPaddingMask to be null or ${d - 1}-D but found ${kpm.dim()}-D tensor instead`);
    }
    if (attnMask !== null) {
      if (attnMask.dim() !== 2 && attnMask.dim() !== 3) {
        throw new RangeError(`${fn}: for ${what} query, expected attnMask to be null, 2-D or 3-D but found ${attnMask.dim()}-D tensor instead`);
      }
      if (d === 2 && attnMask.dim() === 3) {
        const want = [numHeads, query.shape[0], key.shape[0]];
        if (JSON.stringify(attnMask.shape) !== JSON.stringify(want)) {
          throw new RangeError(`${fn}: expected attnMask shape to be ${JSON.stringify(want)} but got ${JSON.stringify(attnMask.shape)}`);
        }
      }
    }
    return d === 3;
  }

  // ModuleDict(entries?): modules by name, in insertion order (as
  // PyTorch's, whose state-dict names read "name.weight"). entries is an
  // object, a Map, an array of [name, module] pairs or a ModuleDict; an
  // object lists integer-like names first (JavaScript's property order),
  // so use pairs or a Map to keep such names in the order given.
  class ModuleDict extends Module {
    constructor(entries) {
      super();
      hidden(this, '_order', []);
      if (entries !== undefined && entries !== null) this.update(entries);
    }
    _entries() { return this._order.filter(k => this[k] instanceof Module).map(k => [k, this[k], 'module']); }
    namedChildren() { return this._order.filter(k => this[k] instanceof Module).map(k => [k, this[k]]); }
    children() { return this.namedChildren().map(e => e[1]); }
    get length() { return this._order.length; }
    has(key) { return this._order.includes(key); }
    get(key) {
      if (!this.has(key)) throw new RangeError(`nn.ModuleDict: no module named '${key}'`);
      return this[key];
    }
    // set(key, module) adds or replaces a module, as PyTorch's
    // add_module: names are non-empty strings without dots, and not those
    // of the dict's own methods and attributes.
    set(key, module) {
      if (typeof key !== 'string') throw new TypeError(`nn.ModuleDict: module name should be a string, got ${typeof key}`);
      if (key === '') throw new RangeError('nn.ModuleDict: module name can\'t be empty string ""');
      if (key.includes('.')) throw new RangeError(`nn.ModuleDict: module name can't contain ".", got: ${key}`);
      if (module !== null && !(module instanceof Module)) throw new TypeError(`nn.ModuleDict: ${key} is not a Module`);
      if (!this.has(key)) {
        if (key in this) throw new RangeError(`nn.ModuleDict: attribute '${key}' already exists`);
        this._order.push(key);
      }
      this[key] = module;
      return this;
    }
    delete(key) { this.pop(key); }
    pop(key) {
      const m = this.get(key);
      this._order.splice(this._order.indexOf(key), 1);
      delete this[key];
      return m;
    }
    clear() { for (const k of [...this._order]) this.pop(k); }
    keys() { return [...this._order]; }
    values() { return this._order.map(k => this[k]); }
    items() { return this._order.map(k => [k, this[k]]); }
    update(entries) {
      let pairs;
      if (entries instanceof ModuleDict) pairs = entries.items();
      else if (entries instanceof Map || Array.isArray(entries)) pairs = [...entries];
      else if (typeof entries === 'object' && !(entries instanceof Module)) pairs = Object.entries(entries);
      else throw new TypeError('nn.ModuleDict.update: expects an object, a Map, an array of [name, module] pairs or a ModuleDict');
      pairs.forEach((p, i) => {
        if (!Array.isArray(p) || p.length !== 2) throw new TypeError(`nn.ModuleDict.update: element ${i} should be a [name, module] pair`);
        this.set(p[0], p[1]);
      });
      return this;
    }
    [Symbol.iterator]() { return this.keys()[Symbol.iterator](); }
  }

  // activation makes a layer that applies f(x, ...args) with the
  // constructor's arguments; check(...args), when given, checks them at
  // construction, not at the first forward.
  const activation = (name, f, repr = () => '', check = () => {}) => {
    const Cls = {
      [name]: class extends Module {
        constructor(...args) { super(); check(...args); hidden(this, 'args', args); }
        forward(x) { return f(x, ...this.args); }
        extraRepr() { return repr(...this.args); }
      },
    }[name];
    return callable(Cls);
  };

  class Sequential extends Module {
    constructor(...modules) {
      super();
      modules.forEach((m, i) => { this[i] = m; });
    }
    get length() { return this.children().length; }
    append(m) { this[this.length] = m; return this; }
    forward(x) {
      for (const m of this.children()) x = m.forward(x);
      return x;
    }
    [Symbol.iterator]() { return this.children()[Symbol.iterator](); }
  }

  class ModuleList extends Module {
    constructor(modules = []) {
      super();
      modules.forEach((m, i) => { this[i] = m; });
    }
    get length() { return this.children().length; }
    append(m) { this[this.length] = m; return this; }
    [Symbol.iterator]() { return this.children()[Symbol.iterator](); }
    map(f) { return this.children().map(f); }
  }

  // Parameter marks a tensor as a trainable leaf that modules list and the
  // engine keeps (it is never released by scopes or generations).
  function Parameter(t, requiresGrad = true) { return native.parameter(t, requiresGrad); }

  // Losses composed of tensor ops (autograd flows through them), with
  // PyTorch's formulas, defaults and argument names in camelCase.
  const reduceLoss = (fn, l, reduction) => {
    switch (reduction) {
      case 'mean': return l.mean();
      case 'sum': return l.sum();
      case 'none': return l;
    }
    throw new RangeError(`${fn}: reduction must be 'mean', 'sum' or 'none', got ${reduction}`);
  };
  // dropout2d warns as PyTorch 1.13 does (once per message, as Python's
  // warnings do per call site) about the inputs it reads other than as
  // (N, C, H, W): a 3-D input is taken as (N, C, L), not as unbatched.
  const nativeDropout2d = F.dropout2d;
  const warned = new Set();
  const warnOnce = msg => {
    if (warned.has(msg)) return;
    warned.add(msg);
    console.warn(`UserWarning: ${msg}`);
  };
  F.dropout2d = function dropout2d(input, ...rest) {
    const d = tensor.isTensor(input) ? input.shape.length : null;
    if (d !== null && d !== 3 && d !== 4) {
      warnOnce(`dropout2d: Received a ${d}-D input to dropout2d, which is deprecated and will result in an error in a future release. To retain the behavior and silence this warning, please use dropout instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).`);
    }
    if (d === 3) {
      warnOnce('dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior will change in a future release to interpret the input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using dropout1d instead.');
    }
    return nativeDropout2d(input, ...rest);
  };
  const asTensor = (v, like) => (v === undefined || v === null || tensor.isTensor(v) ? v : tensor.tensor(v, { dtype: like.dtype }));
  F.l1Loss = function l1Loss(input, target, opts) {
    const fn = 'nn.functional.l1Loss';
    const { reduction = 'mean' } = options(fn, opts, 'reduction');
    return reduceLoss(fn, input.sub(target).abs(), reduction);
  };
  F.smoothL1Loss = function smoothL1Loss(input, target, opts) {
    const fn = 'nn.functional.smoothL1Loss';
    const { reduction = 'mean', beta = 1 } = options(fn, opts, 'reduction', 'beta');
    if (!(beta >= 0)) throw new RangeError(`${fn}: beta must not be negative, got ${beta}`);
    const d = input.sub(target).abs();
    if (beta === 0) return reduceLoss(fn, d, reduction);
    // 0.5·d²/beta below beta, d − 0.5·beta above.
    const small = d.lt(beta).to(d.dtype);
    return reduceLoss(fn, small.mul(d.mul(d).mul(0.5 / beta)).add(small.rsub(1).mul(d.sub(0.5 * beta))), reduction);
  };
  F.nllLoss = function nllLoss(input, target, opts) {
    const fn = 'nn.functional.nllLoss';
    const { reduction = 'mean', ignoreIndex = -100, weight } = options(fn, opts, 'reduction', 'ignoreIndex', 'weight');
    if (input.dim() !== 2 || target.dim() !== 1) {
      throw new RangeError(`${fn}: expects input [N, C] and target [N], got ${JSON.stringify(input.shape)} and ${JSON.stringify(target.shape)}`);
    }
    const valid = target.ne(ignoreIndex);
    const t = target.maskedFill(valid.logicalNot(), 0);
    let w = valid.to(input.dtype);
    if (weight !== undefined && weight !== null) w = w.mul(asTensor(weight, input).indexSelect(0, t));
    const l = input.gather(1, t.unsqueeze(1)).squeeze(1).neg().mul(w);
    return reduction === 'mean' ? l.sum().div(w.sum()) : reduceLoss(fn, l, reduction);
  };
  F.binaryCrossEntropyWithLogits = function binaryCrossEntropyWithLogits(input, target, opts) {
    const fn = 'nn.functional.binaryCrossEntropyWithLogits';
    const { reduction = 'mean', weight, posWeight } = options(fn, opts, 'reduction', 'weight', 'posWeight');
    // PyTorch's stable form: (1 − y)·x + m + log(e^−m + e^(−x−m)), m = max(−x, 0);
    // with posWeight the log term is scaled by 1 + (posWeight − 1)·y.
    const m = input.neg().relu();
    const logTerm = m.neg().exp().add(input.neg().sub(m).exp()).log();
    let l;
    if (posWeight !== undefined && posWeight !== null) {
      const lw = asTensor(posWeight, input).sub(1).mul(target).add(1);
      l = target.rsub(1).mul(input).add(lw.mul(logTerm.add(m)));
    } else {
      l = target.rsub(1).mul(input).add(m).add(logTerm);
    }
    if (weight !== undefined && weight !== null) l = l.mul(asTensor(weight, input));
    return reduceLoss(fn, l, reduction);
  };
  F.oneHot = function oneHot(t, numClasses = -1) {
    const fn = 'nn.functional.oneHot';
    if (t.dtype !== 'int64') throw new TypeError(`${fn}: expects an int64 tensor of class indices, got ${t.dtype}`);
    const n = numClasses === -1 ? t.max().item() + 1 : numClasses;
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`${fn}: numClasses must be a positive integer or -1, got ${numClasses}`);
    const idx = t.unsqueeze(-1);
    return tensor.zeros([...t.shape, n], { dtype: 'int64' }).scatterAdd(-1, idx, tensor.ones(idx.shape, { dtype: 'int64' }));
  };

  // The loss modules over the functional losses, with the same options.
  const lossModule = (name, f, ...keys) => callable({
    [name]: class extends Module {
      constructor(opts = {}) { super(); hidden(this, 'options', options(`nn.${name}`, opts, ...keys)); }
      forward(input, target) { return f(input, target, this.options); }
    },
  }[name]);

  // DistributedDataParallel wraps a module for data-parallel training:
  // rank 0's parameters are broadcast at construction, gradients are
  // reduced in buckets during backward, and reading a gradient (the
  // optimizer step) waits for the reduction. The wrapped module is
  // registered as "module", so names read "module.0.weight" as in PyTorch.
  class DistributedDataParallel extends Module {
    constructor(module, options = {}) {
      super();
      if (!(module instanceof Module)) throw new TypeError('DistributedDataParallel: expects an nn.Module');
      this.module = module;
      hidden(this, '_reducer', native.ddp(module.namedParameters(), options, module.namedBuffers()));
    }
    // forward first ends the previous iteration's reduction (and, under a
    // ZeRO overlap hook, waits for the parameter updates it sent), then,
    // with broadcastBuffers (the default), takes rank 0's buffers.
    forward(...args) {
      this._reducer.finalize();
      this._reducer.syncBuffers();
      return this.module.forward(...args);
    }
    // registerCommHook(state, hook): hook(state, bucket) returns a future
    // of the reduced bucket (or the tensor itself); bucket has index,
    // isLast, buffer, parameters, names and offsets.
    // registerCommHook(hook) alone takes a hook that needs no state, such
    // as hooks.wasm('topk.wasm').
    registerCommHook(state, hook) {
      if (hook === undefined && typeof state === 'function') [state, hook] = [null, state];
      this._reducer.registerCommHook(state, hook);
    }
    // noSync(fn): gradients of the backward passes inside fn accumulate
    // locally; the next synchronised backward reduces the sum.
    noSync(fn) {
      this._reducer.setRequireSync(false);
      try { return fn(); } finally { this._reducer.setRequireSync(true); }
    }
    // join(fn): fn is this rank's training loop over its own data; ranks
    // whose data runs out first keep taking part in the others' gradient
    // reductions (with zeros) until every rank has joined, then all take
    // the parameters of the last rank to finish (uneven inputs).
    join(fn) { return this._reducer.join(fn); }
    bucketNames() { return this._reducer.bucketNames(); }
  }

  // The built-in hooks, as torch.distributed.algorithms.ddp_comm_hooks;
  // they run in Go. registerCommHook(state, hook) takes them like a
  // JavaScript hook: model.registerCommHook(null, dist.commHooks.fp16CompressHook),
  // model.registerCommHook(dist.commHooks.PowerSGDState({ matrixApproximationRank: 2 }),
  // dist.commHooks.powerSGDHook), dist.commHooks.bf16CompressWrapper(hook).
  const builtinHook = (name, extra = {}) => Object.assign(() => {
    throw new Error(`dist.commHooks: ${name} runs inside DistributedDataParallel; pass it to registerCommHook`);
  }, { builtin: name }, extra);
  const commHooks = {
    allreduceHook: builtinHook('allreduce'),
    fp16CompressHook: builtinHook('fp16Compress'),
    bf16CompressHook: builtinHook('bf16Compress'),
    powerSGDHook: builtinHook('powerSGD'),
    batchedPowerSGDHook: builtinHook('batchedPowerSGD'),
    postLocalSGDHook: builtinHook('postLocalSGD'),
    // PostLocalSGDState({ startLocalSGDIter, subgroup, postLocalGradientAllreduce }):
    // without a subgroup, the ranks of this rank's node (dist.newSubgroups()).
    // Anything but an options object goes to native.postLocalSGDState as
    // is, which names what it got.
    PostLocalSGDState: (options = {}) => native.postLocalSGDState(
      options !== null && typeof options === 'object' && !Array.isArray(options) && !tensor.isTensor(options) &&
        options.subgroup === undefined && options.postLocalGradientAllreduce !== false
        ? { ...options, subgroup: newSubgroups()[0] } : options),
    PowerSGDState: (options = {}) => native.powerSGDState(options),
    fp16CompressWrapper: hook => builtinHook('fp16Wrapper', { inner: hook }),
    bf16CompressWrapper: hook => builtinHook('bf16Wrapper', { inner: hook }),
  };

  // Wasm comm hooks (docs/wasm-hook-abi.md), sandboxed modules built
  // from any language: model.registerCommHook(hooks.wasm('topk.wasm',
  // { config: { ratio: 0.01 }, onError: 'fallback' })). Options:
  // memoryLimitMB, timeoutMs, trusted (no loop checks), onError ('abort' or 'fallback') and config
  // (a string, or a value handed to the module as JSON).
  // hooks.wasmSchedule(path, options) is a ZeRO step schedule in
  // WebAssembly (docs/wasm-schedule-abi.md) for zero.hookWithZeroSchedule,
  // with the same options but onError: a schedule has no fallback.
  const hooks = Object.freeze({
    wasm(path, options = {}) {
      if (typeof path !== 'string') throw new TypeError(`hooks.wasm(path, options): path must be the .wasm file's path, got ${typeof path}`);
      if (options === null || typeof options !== 'object') throw new TypeError('hooks.wasm(path, options): options must be an object');
      return builtinHook('wasm', { path, options });
    },
    wasmSchedule(path, options = {}) {
      if (typeof path !== 'string') throw new TypeError(`hooks.wasmSchedule(path, options): path must be the .wasm file's path, got ${typeof path}`);
      if (options === null || typeof options !== 'object') throw new TypeError('hooks.wasmSchedule(path, options): options must be an object');
      return Object.freeze({ __zeroSchedule: 'wasm', name: path, path, options });
    },
  });

  const nn = {
    Module,
    Parameter,
    Linear: callable(Linear),
    Embedding: callable(Embedding),
    LayerNorm: callable(LayerNorm),
    Dropout: callable(Dropout),
    RMSNorm: callable(RMSNorm),
    Conv1d: callable(Conv1d),
    Conv2d: callable(Conv2d),
    MaxPool2d: callable(MaxPool2d),
    AvgPool2d: callable(AvgPool2d),
    AdaptiveAvgPool2d: callable(AdaptiveAvgPool2d),
    Dropout2d: callable(Dropout2d),
    BatchNorm1d: callable(BatchNorm1d),
    BatchNorm2d: callable(BatchNorm2d),
    SyncBatchNorm: callable(SyncBatchNorm),
    MultiheadAttention: callable(MultiheadAttention),
    ModuleDict: callable(ModuleDict),
    Sequential: callable(Sequential),
    ModuleList: callable(ModuleList),
    CrossEntropyLoss: lossModule('CrossEntropyLoss', (i, t, o) => F.crossEntropy(i, t, o), 'reduction', 'ignoreIndex', 'labelSmoothing'),
    MSELoss: lossModule('MSELoss', (i, t, o) => F.mseLoss(i, t, o), 'reduction'),
    L1Loss: lossModule('L1Loss', (i, t, o) => F.l1Loss(i, t, o), 'reduction'),
    SmoothL1Loss: lossModule('SmoothL1Loss', (i, t, o) => F.smoothL1Loss(i, t, o), 'reduction', 'beta'),
    NLLLoss: lossModule('NLLLoss', (i, t, o) => F.nllLoss(i, t, o), 'reduction', 'ignoreIndex', 'weight'),
    BCEWithLogitsLoss: lossModule('BCEWithLogitsLoss', (i, t, o) => F.binaryCrossEntropyWithLogits(i, t, o), 'reduction', 'weight', 'posWeight'),
    ReLU: activation('ReLU', x => x.relu()),
    GELU: activation('GELU', (x, a) => x.gelu(a !== null && typeof a === 'object' ? a : { approximate: a ?? 'none' }),
      a => { const s = a !== null && typeof a === 'object' ? a.approximate : a; return s && s !== 'none' ? `approximate='${s}'` : ''; },
      a => { if (a !== null && typeof a === 'object') options('nn.GELU', a, 'approximate'); }),
    SiLU: activation('SiLU', x => x.silu()),
    Tanh: activation('Tanh', x => x.tanh()),
    Sigmoid: activation('Sigmoid', x => x.sigmoid()),
    Softmax: activation('Softmax', (x, dim = -1) => x.softmax(dim), (dim = -1) => `dim=${dim}`),
    LogSoftmax: activation('LogSoftmax', (x, dim = -1) => x.logSoftmax(dim), (dim = -1) => `dim=${dim}`),
    Identity: activation('Identity', x => x),
    Flatten: activation('Flatten', (x, start = 1, end = -1) => x.flatten(start, end)),
    functional: F,
    init,
    parallel: { DistributedDataParallel: callable(DistributedDataParallel), commHooks },
    utils: {
      clipGradNorm_: (params, maxNorm, normType = 2) => native.clipGradNorm(Array.from(params), maxNorm, normType),
      clipGradNorm: (params, maxNorm, normType = 2) => native.clipGradNorm(Array.from(params), maxNorm, normType),
      // checkpoint(fn, ...args): activation checkpointing (torch.utils.checkpoint).
      checkpoint: (fn, ...args) => native.checkpoint(fn, ...args),
      // checkpointWrapper(module): the module's forward checkpointed from now
      // on (torch.distributed's checkpoint_wrapper, in place). Under ZeRO
      // stage 3 wrap a block before zero.fullyShard, so that the
      // recomputation runs inside the unit's gather.
      // consumePrefixInStateDictIfPresent(stateDict, prefix) is
      // torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: it
      // strips prefix ("module.", of a DistributedDataParallel model's state
      // dict) from the keys that start with it, in place, keeping their
      // order, and from the keys of stateDict._metadata when there is one.
      consumePrefixInStateDictIfPresent(stateDict, prefix) {
        const fn = 'nn.utils.consumePrefixInStateDictIfPresent';
        if (stateDict === null || typeof stateDict !== 'object') throw new TypeError(`${fn}: expects a state dict, got ${stateDict === null ? 'null' : typeof stateDict}`);
        if (typeof prefix !== 'string') throw new TypeError(`${fn}: prefix must be a string, got ${typeof prefix}`);
        const strip = (obj, skip) => {
          const entries = Object.keys(obj).filter(k => k !== skip).map(k => [k, obj[k]]);
          if (!entries.some(([k]) => k.startsWith(prefix))) return;
          const renamed = new Set(entries.filter(([k]) => k.startsWith(prefix)).map(([k]) => k.slice(prefix.length)));
          for (const [k] of entries) delete obj[k];
          for (const [k, v] of entries) {
            if (k.startsWith(prefix)) obj[k.slice(prefix.length)] = v;
            else if (!renamed.has(k)) obj[k] = v; // a stripped key wins, as in PyTorch
          }
        };
        strip(stateDict, '_metadata');
        const meta = stateDict._metadata;
        if (meta !== null && typeof meta === 'object' && !tensor.isTensor(meta)) {
          const bare = prefix.replace(/\./g, '');
          for (const k of Object.keys(meta)) {
            if (k.length > 0 && k === bare) { meta[''] = meta[k]; delete meta[k]; }
          }
          strip(meta);
        }
        return stateDict;
      },
      checkpointWrapper(module) {
        if (!(module instanceof Module)) throw new TypeError(`nn.utils.checkpointWrapper: expects a module, got ${typeof module}`);
        const forward = module.forward.bind(module);
        module.forward = (...args) => native.checkpoint(forward, ...args);
        return module;
      },
    },
  };

  // Optimizer is the base of optimizers written in JavaScript, as
  // torch.optim.Optimizer: new MyOptimizer(params, defaults), where params
  // is an array of parameters or of groups { params, ...options } and
  // defaults fill the options a group leaves out (optim.required: one it
  // must give). A subclass implements step(closure) over this.paramGroups
  // and keeps per-parameter state in this.state, a Map from parameter to
  // object; state tensors outlive a step, so make them with .keep().
  // stateDict() and loadStateDict() use PyTorch's layout (parameters as
  // indices in group order), and zero.ZeroRedundancyOptimizer takes such a
  // class as its optimizer.
  const required = Object.freeze({ toString: () => '<required parameter>' });
  class Optimizer {
    constructor(params, defaults = {}) {
      const name = this.constructor.name;
      if (params === null || typeof params !== 'object' || typeof params[Symbol.iterator] !== 'function' || tensor.isTensor(params)) {
        throw new TypeError(`${name}: params must be an array of parameters or of parameter groups, got ${typeof params}`);
      }
      if (defaults === null || typeof defaults !== 'object') throw new TypeError(`${name}: defaults must be an object`);
      this.defaults = { ...defaults };
      this.state = new Map();
      this.paramGroups = [];
      const list = Array.from(params);
      if (list.length === 0) throw new RangeError(`${name}: optimizer got an empty parameter list`);
      for (const g of tensor.isTensor(list[0]) ? [{ params: list }] : list) this.addParamGroup(g);
    }

    [inspectCustom]() { return native.optimizerRepr(this.constructor.name, this.paramGroups); }

    addParamGroup(group) {
      const name = `${this.constructor.name}.addParamGroup`;
      if (group === null || typeof group !== 'object' || Array.isArray(group) || tensor.isTensor(group)) {
        throw new TypeError(`${name}: a parameter group is an object { params, ...options }`);
      }
      if (group.params === undefined) throw new TypeError(`${name}: the group has no params`);
      const params = tensor.isTensor(group.params) ? [group.params] : Array.from(group.params);
      for (const [i, p] of params.entries()) {
        if (!tensor.isTensor(p)) throw new TypeError(`${name}: params[${i}] is not a tensor`);
        if (!p.isLeaf) throw new RangeError(`${name}: params[${i}]: can't optimize a non-leaf tensor`);
      }
      const seen = new Set(this.paramGroups.flatMap(g => g.params));
      if (new Set(params).size !== params.length || params.some(p => seen.has(p))) {
        throw new RangeError(`${name}: some parameters appear in more than one parameter group`);
      }
      const g = { ...group, params };
      for (const [k, v] of Object.entries(this.defaults)) {
        if (v === required && !(k in group)) throw new RangeError(`${name}: the group does not give the required option ${k}`);
        if (!(k in g)) g[k] = v;
      }
      this.paramGroups.push(g);
    }

    // zeroGrad(setToNone = false), or zeroGrad({ setToNone }), as PyTorch 1.13's.
    zeroGrad(setToNone = false) {
      if (setToNone !== null && typeof setToNone === 'object') {
        ({ setToNone = false } = options(`${this.constructor.name}.zeroGrad`, setToNone, 'setToNone'));
      }
      for (const g of this.paramGroups) {
        for (const p of g.params) {
          if (!p.grad) continue;
          if (setToNone) p.grad = null;
          else p.grad.zero_();
        }
      }
    }

    step() {
      throw new Error(`${this.constructor.name}.step is not implemented: an optimizer class implements step(closure)`);
    }

    stateDict() {
      const index = new Map();
      const param_groups = this.paramGroups.map(g => {
        const { params, ...options } = g;
        return { ...options, params: params.map(p => { index.set(p, index.size); return index.get(p); }) };
      });
      const state = {};
      for (const [p, s] of this.state) {
        if (index.has(p)) state[index.get(p)] = { ...s };
      }
      return { state, param_groups };
    }

    loadStateDict(sd) {
      const name = `${this.constructor.name}.loadStateDict`;
      const groups = sd && sd.param_groups;
      if (!Array.isArray(groups) || sd.state === null || typeof sd.state !== 'object') {
        throw new TypeError(`${name}: expects a state dict { state, param_groups }`);
      }
      if (groups.length !== this.paramGroups.length) {
        throw new RangeError(`${name}: the state dict has ${groups.length} parameter groups, the optimizer ${this.paramGroups.length}`);
      }
      const byIndex = new Map();
      groups.forEach((g, i) => {
        const mine = this.paramGroups[i].params;
        if (!Array.isArray(g.params) || g.params.length !== mine.length) {
          throw new RangeError(`${name}: group ${i} of the state dict has ${g.params && g.params.length} parameters, the optimizer's ${mine.length}`);
        }
        g.params.forEach((at, j) => byIndex.set(String(at), mine[j]));
      });
      const state = new Map();
      for (const [at, s] of Object.entries(sd.state)) {
        const p = byIndex.get(at);
        if (!p) throw new RangeError(`${name}: the state dict has state for parameter ${at}, which no group lists`);
        const own = {};
        for (const [k, v] of Object.entries(s)) own[k] = tensor.isTensor(v) ? v.clone().keep() : v;
        state.set(p, own);
      }
      this.state = state;
      groups.forEach((g, i) => {
        const { params, ...options } = g;
        Object.assign(this.paramGroups[i], options);
      });
    }
  }

  // ShardedOptimizer is ZeroRedundancyOptimizer over an optimizer class
  // written in JavaScript (PyTorch's optimizer_class): the parameters are
  // partitioned as PyTorch does (greedy, stage 1), each rank builds the
  // class over its own parameters (this.optim), and a step runs it, then
  // broadcasts every parameter from its owner. Its paramGroups are the
  // global groups; their options (a scheduler's lr) reach the local
  // optimizer at every step. ZeRO's keys (native.zero.optionKeys, Go's
  // zeroOptionKeys) are its own; every other key goes to the class as its
  // defaults. logMemory logs what the built-in ZeRO logs after the first
  // step (memory()).
  class ShardedOptimizer extends Optimizer {
    constructor(params, options) {
      const { optimizer: Cls, processGroup, logMemory = true, partition = 'greedy', stage = 1, overlapWithDDP = false,
        parametersAsBucketView = false, bucketCapMB } = options;
      const fn = `zero.ZeroRedundancyOptimizer(${Cls.name || 'optimizer class'})`;
      const handled = ['optimizer', 'processGroup', 'logMemory', 'partition', 'stage', 'overlapWithDDP', 'parametersAsBucketView', 'bucketCapMB'];
      const defaults = {};
      for (const [k, v] of Object.entries(options)) {
        if (!native.zero.optionKeys.includes(k)) defaults[k] = v;
        else if (!handled.includes(k)) throw new RangeError(`${fn}: ${k} is not supported with an optimizer class; use a built-in optimizer ("adamw", ...) for it`);
      }
      if (partition !== 'greedy' || (stage !== 1 && stage !== 0) || overlapWithDDP || parametersAsBucketView || bucketCapMB !== undefined) {
        throw new RangeError(`${fn}: an optimizer class runs over whole parameters: the greedy partition of stage 1, without overlapWithDDP, parametersAsBucketView or bucketCapMB (those update slices of flat buckets in Go; use a built-in optimizer for them)`);
      }
      super(params, defaults);
      this._pg = processGroup ?? dist;
      this._owner = new Map();
      hidden(this, '__joinStep', () => this.step()); // dist.join's step on a rank that ran out of inputs
      hidden(this, '_logMemory', Boolean(logMemory));
      hidden(this, '_steps', 0);
      this._partition();
      const local = this._localGroups();
      this.optim = new Cls(local, defaults);
      if (typeof this.optim.step !== 'function' || !Array.isArray(this.optim.paramGroups)) {
        throw new TypeError(`${fn}: the optimizer class must build an object with step() and paramGroups, as optim.Optimizer's subclasses do`);
      }
      ShardedOptimizer._checkSpellings(fn, Object.keys(defaults), this.optim.defaults);
    }

    // _checkSpellings: the class decides which options it takes (it gets
    // every key that is not ZeRO's), so a key of its own cannot be told
    // from a mistake by its name alone. What can be told, and is an
    // error, is another spelling of a key that ZeRO or the class's
    // defaults have: weight_decay where the defaults hold weightDecay (or
    // the other way round), logmemory for logMemory. "Another spelling"
    // is simply the same letters once underscores and case are dropped;
    // near spellings by edit distance are not errors here, since a
    // class's own keys may well be near each other (beta1, beta2).
    static _checkSpellings(fn, keys, classDefaults) {
      const known = [...native.zero.optionKeys];
      if (classDefaults !== null && typeof classDefaults === 'object') known.push(...Object.keys(classDefaults));
      const norm = k => k.replace(/_/g, '').toLowerCase();
      for (const k of keys) {
        const meant = known.find(c => c !== k && norm(c) === norm(k));
        if (meant !== undefined) throw new TypeError(`${fn}: unknown option "${k}" (did you mean ${meant}?)`);
      }
    }

    get rank() { return this._pg.rank; }
    get worldSize() { return this._pg.size ?? this._pg.worldSize; }
    get processGroup() { return this._pg; }

    _partition() {
      const owners = native.zero.greedyPartition(this.paramGroups.map(g => g.params.map(p => p.numel())), this.worldSize);
      this.paramGroups.forEach((g, i) => g.params.forEach((p, j) => this._owner.set(p, owners[i][j])));
    }

    // This rank's share of global group i, largest parameters first (the
    // order of PyTorch's local optimizer).
    _localGroup(i) {
      const { params, ...options } = this.paramGroups[i];
      const sorted = params.map((p, j) => [p, j]).sort((a, b) => b[0].numel() - a[0].numel() || a[1] - b[1]).map(e => e[0]);
      return { ...options, params: sorted.filter(p => this._owner.get(p) === this.rank) };
    }

    _localGroups() { return this.paramGroups.map((_, i) => this._localGroup(i)); }

    // _syncGroups copies every option but params from groups to groups.
    static _syncGroups(from, to) {
      from.forEach((g, i) => {
        for (const [k, v] of Object.entries(g)) if (k !== 'params') to[i][k] = v;
      });
    }

    addParamGroup(group) {
      super.addParamGroup(group);
      if (!this.optim) return; // the constructor's groups
      this._partition();
      if (typeof this.optim.addParamGroup !== 'function') {
        throw new TypeError('zero.ZeroRedundancyOptimizer.addParamGroup: the local optimizer has no addParamGroup');
      }
      this.optim.addParamGroup(this._localGroup(this.paramGroups.length - 1));
    }

    step(closure) {
      ShardedOptimizer._syncGroups(this.paramGroups, this.optim.paramGroups);
      const loss = closure === undefined ? this.optim.step() : this.optim.step(closure);
      tensor.noGrad(() => {
        const works = this.paramGroups.flatMap(g => g.params.map(p => this._pg.broadcast(p, this._owner.get(p))));
        for (const w of works) w.wait();
      });
      ShardedOptimizer._syncGroups(this.optim.paramGroups, this.paramGroups);
      if (++this._steps === 1 && this._logMemory) {
        // What sharding saved, once per rank, as the built-in ZeRO logs it.
        const m = this.memory();
        const mib = b => `${(b / 2 ** 20).toFixed(2)} MiB`;
        console.error(`zero: rank ${this.rank} of ${this.worldSize} (stage 1, greedy partition) holds parameters ${mib(m.parameters)}, gradients ${mib(m.gradients)}, optimizer state ${mib(m.optimizerState)}`);
      }
      return loss;
    }

    // memory(): this rank's bytes, as the built-in ZeRO's memory(): every
    // parameter and gradient (stage 1 keeps them all), the parameters it
    // updates, and the tensors of the local optimizer's state (this.state
    // of an optim.Optimizer).
    memory() {
      const size = { float32: 4, float64: 8, bfloat16: 2, float16: 2, int64: 8, int32: 4, uint8: 1, bool: 1 };
      const bytes = t => t.numel() * size[t.dtype];
      const m = { parameters: 0, gradients: 0, optimizerState: 0, ownedParameters: 0 };
      for (const g of this.paramGroups) {
        for (const p of g.params) {
          m.parameters += bytes(p);
          if (p.grad) m.gradients += bytes(p.grad);
          if (this._owner.get(p) === this.rank) m.ownedParameters += bytes(p);
        }
      }
      if (this.optim.state instanceof Map) {
        for (const s of this.optim.state.values()) {
          for (const v of Object.values(s ?? {})) if (tensor.isTensor(v)) m.optimizerState += bytes(v);
        }
      }
      m.total = m.parameters + m.gradients + m.optimizerState;
      return m;
    }

    // clipGradNorm_ clips every parameter's gradient (each rank holds them
    // all at stage 1) by their total norm.
    clipGradNorm_(maxNorm, normType = 2) {
      return nn.utils.clipGradNorm_(this.paramGroups.flatMap(g => g.params), maxNorm, normType);
    }

    // consolidateStateDict(to) gathers every rank's local state on rank
    // to, for stateDict(); every rank must call it. Each rank in turn
    // sends its entries' layout as an object and their tensors with
    // broadcasts, as PyTorch's consolidate_state_dict does.
    consolidateStateDict(to = 0) {
      const index = new Map(this.paramGroups.flatMap(g => g.params).map((p, i) => [p, i]));
      const local = this.optim.stateDict();
      const localParams = this.optim.paramGroups.flatMap(g => g.params);
      const mine = new Map(); // global index → this rank's state entry
      local.param_groups.flatMap(g => g.params).forEach((id, j) => {
        if (local.state[id]) mine.set(index.get(localParams[j]), local.state[id]);
      });
      const state = {};
      for (let src = 0; src < this.worldSize; src++) {
        let layout = null;
        if (src === this.rank) {
          layout = {};
          for (const [at, s] of mine) {
            layout[at] = {};
            for (const [k, v] of Object.entries(s)) {
              layout[at][k] = tensor.isTensor(v) ? { shape: v.shape, dtype: v.dtype } : { value: v };
            }
          }
        }
        layout = this._pg.broadcastObject(layout, src);
        for (const [at, e] of Object.entries(layout)) {
          const entry = {};
          for (const [k, d] of Object.entries(e)) {
            if (!('shape' in d)) { entry[k] = d.value; continue; }
            const buf = src === this.rank ? mine.get(Number(at))[k].clone() : tensor.empty(d.shape, { dtype: d.dtype });
            this._pg.broadcast(buf, src).wait();
            entry[k] = buf.keep();
          }
          if (this.rank === to) state[at] = entry;
          else for (const v of Object.values(entry)) if (tensor.isTensor(v)) v.release();
        }
      }
      this._consolidated = this.rank === to ? state : null;
    }

    stateDict() {
      if (!this._consolidated) {
        throw new Error('zero.ZeroRedundancyOptimizer.stateDict: this rank holds no consolidated state: call consolidateStateDict(to) on every rank first, then stateDict() on rank to');
      }
      const sd = super.stateDict();
      return { state: this._consolidated, param_groups: sd.param_groups };
    }

    // loadStateDict takes a consolidated state dict: the global groups'
    // options, and to the local optimizer the state of this rank's
    // parameters.
    loadStateDict(sd) {
      const name = 'zero.ZeroRedundancyOptimizer.loadStateDict';
      const groups = sd && sd.param_groups;
      if (!Array.isArray(groups) || sd.state === null || typeof sd.state !== 'object' || groups.length !== this.paramGroups.length) {
        throw new RangeError(`${name}: expects a consolidated state dict with ${this.paramGroups.length} parameter groups`);
      }
      const global = this.paramGroups.flatMap(g => g.params);
      const at = new Map(global.map((p, i) => [p, i]));
      groups.forEach((g, i) => {
        if (!Array.isArray(g.params) || g.params.length !== this.paramGroups[i].params.length) {
          throw new RangeError(`${name}: group ${i} of the state dict does not match the optimizer's`);
        }
      });
      ShardedOptimizer._syncGroups(groups, this.paramGroups);
      const ids = groups.flatMap(g => g.params);
      const state = {};
      let j = 0;
      const local = this.optim.paramGroups.map(g => {
        const { params, ...options } = g;
        return {
          ...options, params: params.map(p => {
            const s = sd.state[ids[at.get(p)]];
            if (s) state[j] = s;
            return j++;
          }),
        };
      });
      ShardedOptimizer._syncGroups(groups, local);
      this.optim.loadStateDict({ state, param_groups: local });
    }
  }

  Object.defineProperty(ShardedOptimizer, 'name', { value: 'ZeroRedundancyOptimizer' });

  // ZeRO: ZeroRedundancyOptimizer(params, {optimizer, lr, ..., partition,
  // parametersAsBucketView, overlapWithDDP, stage}) and the overlap hooks,
  // which wrap any comm hook: model.registerCommHook(null,
  // zero.hookWithZeroStep(dist.commHooks.allreduceHook, model, zopt)).
  const hookWithZeroSchedule = (name, hook, model, zopt, schedule, options = {}) => {
    if (!(model instanceof DistributedDataParallel)) throw new TypeError(`zero.${name}: the second argument must be the DistributedDataParallel model`);
    if (typeof hook !== 'function') throw new TypeError(`zero.${name}: the first argument must be a comm hook (for example dist.commHooks.allreduceHook)`);
    // No schedule: the one of zeroeng run --zero-schedule (an error without it).
    if (schedule === undefined || schedule === null) schedule = { __zeroSchedule: 'commandLine', name: 'commandLine' };
    if (!schedule.__zeroSchedule) throw new TypeError(`zero.${name}: the schedule must be made by zero.schedule({...}) or be one of zero.schedules`);
    return builtinHook('zeroStep', { inner: hook, reducer: model._reducer, zopt, options, schedule });
  };
  // zero.schedule({ name, iterationBegin(ctx), bucketReady(ctx, i),
  // bucketReduced(ctx, i), backwardEnd(ctx) }): a ZeRO step schedule
  // (zero.hookWithZeroSchedule; docs/api.md "Step schedules"). ctx has
  // numBuckets, rank, worldSize, iteration, bucket(i) ({ numel, names,
  // owners }), reduced(i) and the actions wait(i), step(i), broadcast(i),
  // stepAndBroadcast(i); what a schedule leaves is done, in bucket order,
  // at the end of backward (an error with { strict: true }). Under stage 1,
  // assign(buckets, worldSize) may return each bucket's owner ranks.
  const scheduleEvents = ['iterationBegin', 'bucketReady', 'bucketReduced', 'backwardEnd'];
  const schedule = spec => {
    const o = options('zero.schedule', spec, 'name', 'assign', ...scheduleEvents);
    for (const k of ['assign', ...scheduleEvents]) {
      if (o[k] !== undefined && typeof o[k] !== 'function') throw new TypeError(`zero.schedule: ${k} must be a function, got ${typeof o[k]}`);
    }
    const out = { __zeroSchedule: true, name: String(o.name === undefined ? 'schedule' : o.name) };
    for (const k of ['assign', ...scheduleEvents]) out[k] = o[k];
    return Object.freeze(out);
  };
  const schedules = Object.freeze({
    afterBackward: Object.freeze({ __zeroSchedule: 'afterBackward', name: 'afterBackward' }),
    interleaved: Object.freeze({ __zeroSchedule: 'interleaved', name: 'interleaved' }),
    // asReduced steps and sends each bucket as soon as its reduction was
    // waited for (under stage 2, while backward goes on).
    asReduced: Object.freeze({ __zeroSchedule: 'asReduced', name: 'asReduced' }),
  });
  const zeroHook = (name, sched) => (hook, model, zopt, options) => hookWithZeroSchedule(name, hook, model, zopt, sched, options);
  // zero.fullyShard(module, { reshardAfterForward = true }) marks module as
  // a ZeRO stage-3 unit (FSDP2's fully_shard): call it on each block, then
  // on the model, whose unit takes the parameters no block has (give the
  // root reshardAfterForward: false, its backward comes first). A
  // ZeroRedundancyOptimizer with stage: 3 then shards every unit's
  // parameters and gathers each just in time around its forward and
  // backward, with the next unit's gather prefetched.
  function fullyShard(module, opts) {
    if (!(module instanceof Module)) throw new TypeError('zero.fullyShard: expects an nn.Module');
    const { reshardAfterForward = true } = options('zero.fullyShard', opts, 'reshardAfterForward');
    if (module._zeroUnit !== undefined) throw new Error(`zero.fullyShard: this ${module.constructor.name} is a unit already`);
    const id = native.zero.unit(module.parameters(), reshardAfterForward !== false);
    hidden(module, '_zeroUnit', id);
    const inner = module.forward;
    hidden(module, 'forward', function (...args) {
      native.zero.beforeForward(id);
      const out = inner.apply(this, args);
      native.zero.afterForward(id, out);
      return out;
    });
    return module;
  }

  // zero.init(fn) returns fn(), building a model without its memory
  // (DeepSpeed's zero.Init): the parameters fn makes, and the files it
  // loads, have no values yet; their initialisations are recorded and a
  // stage-3 ZeroRedundancyOptimizer makes each rank's slices only, the
  // very values the model built whole would have.
  const zero = Object.freeze({
    init: fn => native.zero.lazyInit(fn),
    fullyShard,
    ZeroRedundancyOptimizer: function ZeroRedundancyOptimizer(params, options) {
      if (options && typeof options.optimizer === 'function') return new ShardedOptimizer(Array.from(params), options);
      return native.zero.ZeroRedundancyOptimizer(Array.from(params), options);
    },
    hookWithZeroStep: zeroHook('hookWithZeroStep', schedules.afterBackward),
    hookWithZeroStepInterleaved: zeroHook('hookWithZeroStepInterleaved', schedules.interleaved),
    hookWithZeroSchedule: (hook, model, zopt, sched, options) => hookWithZeroSchedule('hookWithZeroSchedule', hook, model, zopt, sched, options),
    schedule,
    schedules,
  });

  const optim = {
    Optimizer,
    required,
    lrScheduler: native.optim.lrScheduler,
  };
  // optim.SGD, optim.Adam, ..., optim.NAdam: one constructor per algorithm
  // of engine/optim's registry, named as PyTorch's class.
  for (const name of native.optim.algorithms) {
    optim[name] = { [name]: (params, options) => native.optim[name](Array.from(params), options) }[name];
  }

  // The dist module is the group of all ranks: it stands for that group
  // wherever a process group is taken or given (zopt.processGroup).
  // newSubgroups(groupSize) splits the ranks into groups of groupSize
  // consecutive ranks (default: the ranks of a node) and returns
  // [this rank's group, every group], as torch.distributed.new_subgroups;
  // every rank must call it.
  function newSubgroups(groupSize = zeroeng.dist.localWorldSize) {
    const n = zeroeng.dist.worldSize;
    if (!Number.isInteger(groupSize) || groupSize < 1 || n % groupSize !== 0) {
      throw new RangeError(`dist.newSubgroups: the group size must divide the world size ${n}, got ${groupSize}`);
    }
    let mine = null;
    const groups = [];
    for (let start = 0; start < n; start += groupSize) {
      const g = zeroeng.dist.newGroup(Array.from({ length: groupSize }, (_, i) => start + i));
      groups.push(g);
      if (g) mine = g;
    }
    return [mine, groups];
  }
  // PeriodicModelAverager({ period, warmupSteps, processGroup }):
  // averager.averageParameters(model.parameters()) after each optimizer
  // step averages them over the group every period steps after warmupSteps.
  const PeriodicModelAverager = options => native.periodicModelAverager(options);

  // join(joinables, fn, options) is PyTorch's Join context:
  // dist.join([model, zopt], () => { ...training loop... }, { throwOnEarlyTermination }).
  const join = (joinables, fn, options) =>
    native.join(Array.from(joinables, j => (j instanceof DistributedDataParallel ? j._reducer : j)), fn, options);
  const dist = native.asWorldGroup(Object.freeze(Object.assign(Object.create(null), zeroeng.dist, {
    DistributedDataParallel: callable(DistributedDataParallel), commHooks, join, newSubgroups, PeriodicModelAverager })));

  // Subset(dataset, indices) is torch.utils.data.Subset: the items of a
  // map-style dataset (a TensorDataset, an array, or an object with length
  // and get(i)) at indices, in their order; a DataLoader takes it as any
  // dataset with length and get(i).
  class Subset {
    constructor(dataset, indices) {
      const n = datasetLength('data.Subset', dataset);
      if (tensor.isTensor(indices)) indices = indices.tolist();
      if (!Array.isArray(indices)) throw new TypeError(`data.Subset: indices must be an array of integers, got ${typeof indices}`);
      for (const i of indices) {
        if (!Number.isInteger(i) || i < -n || i >= n) throw new RangeError(`data.Subset: index ${i} is out of range for a dataset of length ${n}`);
      }
      this.dataset = dataset;
      this.indices = indices;
    }
    get length() { return this.indices.length; }
    get(i) {
      if (!Number.isInteger(i) || i < -this.indices.length || i >= this.indices.length) {
        throw new RangeError(`Subset.get: index ${i} is out of range for a subset of length ${this.indices.length}`);
      }
      const j = this.indices[i < 0 ? i + this.indices.length : i];
      return datasetItem(this.dataset, j < 0 ? j + datasetLength('Subset.get', this.dataset) : j);
    }
  }
  const datasetLength = (fn, ds) => {
    const n = ds !== null && (typeof ds === 'object' || typeof ds === 'function') ? ds.length : undefined;
    if (!Number.isInteger(n) || n < 0 || !(Array.isArray(ds) || typeof ds.get === 'function')) {
      throw new TypeError(`${fn}: expects a map-style dataset (data.TensorDataset, an array, or an object with length and get(i)), got ${ds === null ? 'null' : typeof ds}`);
    }
    return n;
  };
  const datasetItem = (ds, i) => (Array.isArray(ds) ? ds[i] : ds.get(i));

  // randomSplit(dataset, lengths, { seed }) is torch.utils.data.random_split:
  // lengths are counts that sum to the dataset's length, or fractions that
  // sum to 1 (floor(frac × length) each, the remainder handed out one at a
  // time from the first); the order is tensor.randperm's, from a generator
  // seeded with seed (torch.Generator().manual_seed(seed)) or the default
  // generator, so that PyTorch makes the same split from the same seed.
  function randomSplit(dataset, lengths, opts) {
    const fn = 'data.randomSplit';
    const n = datasetLength(fn, dataset);
    const { seed } = options(fn, opts, 'seed');
    if (!Array.isArray(lengths) || lengths.some(l => typeof l !== 'number' || !Number.isFinite(l))) {
      throw new TypeError(`${fn}: lengths must be an array of numbers`);
    }
    const total = lengths.reduce((a, b) => a + b, 0);
    if (Math.abs(total - 1) <= 1e-9 * Math.max(1, Math.abs(total)) && total <= 1) {
      lengths = lengths.map((frac, i) => {
        if (frac < 0 || frac > 1) throw new RangeError(`${fn}: fraction at index ${i} is not between 0 and 1`);
        return Math.floor(n * frac);
      });
      const remainder = n - lengths.reduce((a, b) => a + b, 0);
      for (let i = 0; i < remainder; i++) lengths[i % lengths.length]++;
    }
    for (const l of lengths) {
      if (!Number.isInteger(l) || l < 0) throw new RangeError(`${fn}: lengths must be non-negative integers or fractions summing to 1, got ${l}`);
    }
    if (lengths.reduce((a, b) => a + b, 0) !== n) {
      throw new RangeError(`${fn}: sum of input lengths (${lengths.join(' + ')}) does not equal the length of the input dataset (${n})`);
    }
    const perm = tensor.randperm(n, seed === undefined ? {} : { seed });
    const indices = perm.tolist();
    perm.release();
    let offset = 0;
    return lengths.map(l => new Subset(dataset, indices.slice(offset, offset += l)));
  }
  const data = Object.assign(zeroeng.data, { Subset: callable(Subset), randomSplit });

  return Object.freeze({
    tensor,
    nn,
    optim,
    zero,
    hooks,
    io: zeroeng.io,
    data,
    dist,
    progress: zeroeng.progress,
    metrics: zeroeng.metrics,
    checkpoint: zeroeng.checkpoint,
    amp: zeroeng.amp,
    trace: zeroeng.trace,
    device: zeroeng.device,
    version: zeroeng.version,
  });
})
