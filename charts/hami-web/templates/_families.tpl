{{/*
The device families hami-web schedules, as data: each family's resource names (from the values HAMi's chart
names them by), whether the server schedules it by default or behind a flag. Everything per family is made from
this one list: kube-scheduler's managedResources, the webhook's matchConditions (the domains of these names) and
the server's --enable-* flags. A new family is one entry here (and its values). Enflame GCU's, Metax GPU's, Moore
Threads', AMD's and AWS Neuron's names are fixed, as HAMi's chart writes them into its device ConfigMap without a value.

Every family's resources are listed whether or not the family is enabled, as k8s/ always did: without the flag
the webhook routes no such pod to hami-scheduler, so the entries cost nothing, and with it they are required (no
node has iluvatar.ai/<chip>.vMem or huawei.com/<chip>-memory in its allocatable).
*/}}
{{- define "hami-web.families" -}}
- name: nvidia
  enabled: true
  flag: ""
  resources:
    - {{ .Values.resourceName | quote }}
    - {{ .Values.resourceMem | quote }}
    - {{ .Values.resourceMemPercentage | quote }}
    - {{ .Values.resourceCores | quote }}
    - {{ .Values.resourcePriority | quote }}
- name: hygon
  enabled: true
  flag: ""
  resources:
    - {{ .Values.dcuResourceName | quote }}
    - {{ .Values.dcuResourceMem | quote }}
    - {{ .Values.dcuResourceCores | quote }}
- name: cambricon
  enabled: true
  flag: ""
  resources:
    - {{ .Values.mluResourceName | quote }}
    - {{ .Values.mluResourceMem | quote }}
    - {{ .Values.mluResourceCores | quote }}
- name: biren
  enabled: true
  flag: ""
  resources:
    - {{ .Values.birenResourceName | quote }}
- name: enflame
  enabled: true
  flag: ""
  resources:
    - "enflame.com/gcu"
- name: enflame-drs
  enabled: true
  flag: ""
  resources:
    - {{ .Values.enflameResourceNameDRSGCU | quote }}
    - {{ .Values.enflameResourceNameGCUMemory | quote }}
    - {{ .Values.enflameResourceNameGCUCore | quote }}
- name: metax
  enabled: true
  flag: ""
  resources:
    - "metax-tech.com/gpu"
- name: metax-sgpu
  enabled: true
  flag: ""
  resources:
    - {{ .Values.metaxResourceName | quote }}
    - {{ .Values.metaxResourceMem | quote }}
    - {{ .Values.metaxResourceCore | quote }}
- name: mthreads
  enabled: true
  flag: ""
  resources:
    - "mthreads.com/vgpu"
    - "mthreads.com/sgpu-memory"
    - "mthreads.com/sgpu-core"
- name: vastai
  enabled: true
  flag: ""
  resources:
    - {{ .Values.vastaiResourceName | quote }}
- name: kunlunxin
  enabled: true
  flag: ""
  resources:
    - {{ .Values.kunlunResourceName | quote }}
    - {{ .Values.kunlunResourceVCountName | quote }}
    - {{ .Values.kunlunResourceVMemoryName | quote }}
- name: amd
  enabled: true
  flag: ""
  resources:
    - "amd.com/gpu"
    - "amd.com/gpumem"
    - "amd.com/gpucores"
- name: awsneuron
  enabled: true
  flag: ""
  resources:
    - "aws.amazon.com/neuron"
    - "aws.amazon.com/neuroncore"
- name: iluvatar
  enabled: {{ .Values.devices.iluvatar.enabled }}
  flag: --enable-iluvatar
  resources: {{ .Values.devices.iluvatar.customresources | toJson }}
- name: ascend
  enabled: {{ .Values.devices.ascend.enabled }}
  flag: --enable-ascend
  resources: {{ .Values.devices.ascend.customresources | toJson }}
{{- end -}}

{{/* Every family's resource names, in family order, each once. */}}
{{- define "hami-web.managedResources" -}}
{{- $names := list -}}
{{- range (include "hami-web.families" . | fromYamlArray) -}}
{{- $names = concat $names .resources -}}
{{- end -}}
{{- $names | uniq | toJson -}}
{{- end -}}

{{/* The domains ("nvidia.com/") of every family's resources, in family order, each once, as a CEL list body. */}}
{{- define "hami-web.resourceDomains" -}}
{{- $domains := list -}}
{{- range (include "hami-web.managedResources" . | fromJsonArray) -}}
{{- $domains = append $domains (printf "'%s/'" (first (splitList "/" .))) -}}
{{- end -}}
{{- $domains | uniq | join ", " -}}
{{- end -}}
